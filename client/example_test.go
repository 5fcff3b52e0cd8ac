package client_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/client"
)

// Register a deployment, then handle a refused create-only request. The
// server here stands in for `berth serve`.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") == "*" {
			w.WriteHeader(http.StatusPreconditionFailed)
			io.WriteString(w, `{"error":"deployment already exists"}`)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"spec":{"id":"web","routes":[{"host":"web.example.com"}],"upstreams":["10.0.0.4:8080"]},
			"kind":"static","desired_replicas":0,"ready":1,"pending":0,"total_in_flight":0,"vms":[]}`)
	}))
	defer srv.Close()

	c, err := client.New(srv.URL, client.WithToken("applb_example"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	spec := apitype.DeploymentSpec{
		ID:        "web",
		Routes:    []apitype.RouteRule{{Host: "web.example.com"}},
		Upstreams: []string{"10.0.0.4:8080"},
	}
	st, err := c.Apply(ctx, spec)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("deployment/%s is %s with %d ready\n", st.Spec.ID, st.Kind, st.Ready)

	_, err = c.Create(ctx, spec)
	fmt.Println(client.IsPreconditionFailed(err), err)
	// Output:
	// deployment/web is static with 1 ready
	// true deployment already exists
}
