package site

import (
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// BenchmarkServeHTTP measures a small-file GET, including the per-request
// os.OpenRoot that lets a handler live without a Close.
func BenchmarkServeHTTP(b *testing.B) {
	h := New(config(tree(b)))
	for _, target := range []string{"/style.css", "/docs/", "/missing"} {
		b.Run(target, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, target, nil)
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}

// BenchmarkOpenRoot is the cost of opening the root per request, to compare
// with the whole request above.
func BenchmarkOpenRoot(b *testing.B) {
	root := tree(b)
	b.ReportAllocs()
	for b.Loop() {
		r, err := os.OpenRoot(root)
		if err != nil {
			b.Fatal(err)
		}
		r.Close()
	}
}
