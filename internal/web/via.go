package web

import (
	"net/http"
	"strings"
)

// ViaBerth reports whether a request passed through berth's data plane on
// its way here: the X-Berth-Hops header the proxy adds to every request it
// forwards (package proxy), or a Via header whose value names berth. Such
// a request came from a deployment's client, never from an operator or a
// fleet host, whatever else it carries.
func ViaBerth(h http.Header) bool {
	if len(h.Values("X-Berth-Hops")) > 0 {
		return true
	}
	for _, v := range h.Values("Via") {
		if strings.Contains(strings.ToLower(v), "berth") {
			return true
		}
	}
	return false
}
