package computertype

// FactsPage is the JSON answer of GET /computers/{id}/facts: facts after
// the request's cursor, in order, and the cursor to ask for the next page
// with (?after=Next).
type FactsPage struct {
	Facts []FactRecord `json:"facts"`
	Next  int64        `json:"next"`
}
