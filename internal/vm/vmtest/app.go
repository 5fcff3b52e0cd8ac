package vmtest

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// ServeApp is the test app of the drivers whose sandboxes run a test
// binary (process, firecracker, kvm): it answers HTTP 200 on host:$PORT
// ("" for every address), "ok" or, with env, what Options.EnvApp
// specifies. It returns, with exit code 1, only when serving fails.
func ServeApp(host string, env bool) int {
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
	err := http.ListenAndServe(host+":"+os.Getenv("PORT"), h)
	fmt.Fprintln(os.Stderr, err)
	return 1
}
