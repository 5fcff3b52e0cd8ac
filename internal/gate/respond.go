package gate

import (
	"encoding/json"
	"html/template"
	"net/http"
	"strings"
)

// gateHeaders are on every response the gate makes itself.
func gateHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
}

// deny answers with a plain-text line (app-lb's bodies), or for a browser
// an HTML page saying the same in words; it counts the refusal.
func (g *Gate) deny(q *req, reason string, status int, text string) int {
	g.m.metrics.add("deny", reason)
	gateHeaders(q.w)
	if q.browser {
		page(q.w, status, pageData{Title: http.StatusText(status), Message: strings.TrimSpace(text), Retry: g.base + "/login"})
		return status
	}
	q.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	q.w.Header().Set("X-Content-Type-Options", "nosniff")
	q.w.WriteHeader(status)
	q.w.Write([]byte(text))
	return status
}

// denyJSON answers a JSON body (the shapes of app-lb.md §3.6).
func (g *Gate) denyJSON(q *req, reason string, status int, body map[string]any) int {
	g.m.metrics.add("deny", reason)
	gateHeaders(q.w)
	raw, _ := json.Marshal(body)
	q.w.Header().Set("Content-Type", "application/json")
	q.w.WriteHeader(status)
	q.w.Write(append(raw, '\n'))
	return status
}

// redirect answers a 302 to loc.
func redirect(q *req, loc string) int {
	gateHeaders(q.w)
	q.w.Header().Set("Location", loc)
	q.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	q.w.WriteHeader(http.StatusFound)
	q.w.Write([]byte("redirecting to " + loc + "\n"))
	return http.StatusFound
}

// pageData fills the one page template.
type pageData struct {
	Title   string
	Message string
	Choices []choice // a sign-in choice page
	Retry   string   // a "try again" link, when it helps
	Back    string   // a link back to the app, after signing out
}

type choice struct {
	Label, URL string
}

// page writes the gate's HTML page: server-rendered, no script, no
// external assets, readable without CSS.
func page(w http.ResponseWriter, status int, d pageData) {
	gateHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	pageTmpl.Execute(w, d)
}

var pageTmpl = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
main{max-width:26rem;margin:12vh auto;background:#fff;border-radius:12px;padding:2rem 2.25rem;box-shadow:0 1px 3px rgba(0,0,0,.12)}
h1{font-size:1.35rem;margin:0 0 .75rem}
p{margin:.5rem 0 1.25rem;color:#444b5a}
a.button{display:block;text-align:center;padding:.7rem 1rem;margin:.6rem 0;border-radius:8px;background:#2457d6;color:#fff;text-decoration:none;font-weight:600}
a.button.secondary{background:#e8ecf5;color:#1d2330}
footer{margin-top:1.5rem;font-size:.8rem;color:#8a90a0}
</style></head>
<body><main>
<h1>{{.Title}}</h1>
{{if .Message}}<p>{{.Message}}</p>{{end}}
{{range .Choices}}<a class="button" href="{{.URL}}">{{.Label}}</a>
{{end}}{{if .Retry}}<a class="button secondary" href="{{.Retry}}">Sign in again</a>
{{end}}{{if .Back}}<a class="button secondary" href="{{.Back}}">Back to the app</a>
{{end}}<footer>Protected by berth</footer>
</main></body></html>
`))
