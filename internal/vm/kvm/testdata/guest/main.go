// Command guest is the berth binary's part inside the kvm driver's test
// guests, built statically by the test: with "agent ..." it is the agent
// (the guest's init); with BERTH_KVM_GUEST_ROLE=app or envapp it is an app
// the conformance suite starts.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/berth-dev/berth/internal/agent"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agent" {
		os.Exit(agent.Main(context.Background(), os.Args[2:], os.Stderr))
	}
	switch os.Getenv("BERTH_KVM_GUEST_ROLE") {
	case "app":
		os.Exit(serve(false))
	case "envapp":
		os.Exit(serve(true))
	}
	fmt.Fprintln(os.Stderr, "guest: want agent ARGS or BERTH_KVM_GUEST_ROLE=app|envapp")
	os.Exit(2)
}

// serve answers HTTP 200 on :$PORT; with env, the body is what
// vmtest.Options.EnvApp specifies.
func serve(env bool) int {
	token := strconv.FormatInt(time.Now().UnixNano(), 10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !env {
			fmt.Fprintln(w, "ok")
			return
		}
		wd, _ := os.Getwd()
		hook, _ := os.ReadFile("hook.txt")
		fmt.Fprintf(w, "%s\n%s\n%s\n%s\n", os.Getenv("GREETING"), wd, strings.TrimSpace(string(hook)), token)
	})
	err := http.ListenAndServe(":"+os.Getenv("PORT"), h)
	fmt.Fprintln(os.Stderr, err)
	return 1
}
