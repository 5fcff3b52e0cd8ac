package apitype

// Error is the admin API's error envelope: {"error": "...", "code"?: "..."}.
// Message is a human sentence (404s start with "no ", which clients rely
// on); Code is a stable machine word where one exists, such as
// "plugin_disabled" or "plugin_not_installed".
//
// The contract does not declare it: app-lb's clients read it from the
// status code and body directly.
type Error struct {
	Message string `json:"error"`
	Code    string `json:"code,omitempty"`
}

// Error returns the message, with the code in brackets when there is one,
// so an *Error can be returned as a Go error.
func (e *Error) Error() string {
	if e.Code != "" {
		return e.Message + " [" + e.Code + "]"
	}
	return e.Message
}
