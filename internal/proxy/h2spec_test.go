package proxy_test

import (
	"encoding/xml"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/berth-dev/berth/internal/proxy"
)

// TestH2Spec runs h2spec (github.com/summerwind/h2spec, a tool of this
// module: go.mod's tool directive) against the front end over TLS, whose
// HTTP/2 is net/http's behind the proxy's Handler, and against a plain
// net/http TLS server in the same run: berth must fail no more of its cases
// than net/http's own HTTP/2 server does. Both counts are logged, with the
// cases that fail on one side only.
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("runs h2spec twice (about 10 s each)")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build h2spec with")
	}
	bin := filepath.Join(t.TempDir(), "h2spec")
	if out, err := exec.Command(gobin, "build", "-o", bin, "github.com/summerwind/h2spec/cmd/h2spec").CombinedOutput(); err != nil {
		t.Fatalf("building h2spec: %v\n%s", err, out)
	}

	// The backend answers as the baseline does: h2spec's requests are
	// GETs and POSTs of /, with and without bodies.
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok\n")
	})
	_, addr := startBackend(t, answer)
	h := proxy.New(proxy.Options{})
	h.Swap(table(entry{static("app", proxy.NewBackend("app-1", addr, false)), catchAll}))
	f := startTLSFront(t, h, proxy.H1Options{})

	base := httptest.NewUnstartedServer(answer)
	base.EnableHTTP2 = true
	base.Config.ErrorLog = log.New(io.Discard, "", 0) // h2spec makes plenty
	base.StartTLS()
	t.Cleanup(base.Close)

	var berth, std []string
	var wg sync.WaitGroup
	wg.Go(func() { berth = runH2Spec(t, bin, f.addr) })
	wg.Go(func() { std = runH2Spec(t, bin, base.Listener.Addr().String()) })
	wg.Wait()
	if len(berth) > len(std) {
		// Some cases wait 2 s for an answer; two runs sharing a loaded
		// machine can miss that. Run berth's again, alone, before
		// counting it.
		t.Logf("berth failed %d cases beside net/http's %d with both running; again alone: %v", len(berth), len(std), berth)
		berth = runH2Spec(t, bin, f.addr)
	}
	t.Logf("h2spec failures: berth %d, net/http %d", len(berth), len(std))
	for _, c := range berth {
		if slices.Contains(std, c) {
			t.Logf("fails on both: %s", c)
		} else {
			t.Logf("fails on berth only: %s", c)
		}
	}
	for _, c := range std {
		if !slices.Contains(berth, c) {
			t.Logf("fails on net/http only: %s", c)
		}
	}
	if len(berth) > len(std) {
		t.Errorf("berth fails %d h2spec cases, net/http %d", len(berth), len(std))
	}
}

// junitReport is the part of h2spec's JUnit report read here.
type junitReport struct {
	Suites []struct {
		Cases []struct {
			Package string    `xml:"package,attr"`
			Name    string    `xml:"classname,attr"`
			Failure *struct{} `xml:"failure"`
			Error   *struct{} `xml:"error"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// runH2Spec runs h2spec over TLS against addr and returns the cases that
// failed (package and name). h2spec exits non-zero when any did; the
// report says which.
func runH2Spec(t *testing.T, bin, addr string) []string {
	host, port, _ := net.SplitHostPort(addr)
	if _, err := strconv.Atoi(port); err != nil {
		t.Errorf("address %q", addr)
		return nil
	}
	report := filepath.Join(t.TempDir(), "report.xml")
	out, err := exec.Command(bin, "--tls", "--insecure", "-h", host, "-p", port, "-j", report).CombinedOutput()
	b, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Errorf("h2spec against %s wrote no report (%v): %v\n%s", addr, rerr, err, out)
		return nil
	}
	var r junitReport
	if err := xml.Unmarshal(b, &r); err != nil {
		t.Errorf("h2spec's report: %v", err)
		return nil
	}
	var failed []string
	total := 0
	for _, s := range r.Suites {
		for _, c := range s.Cases {
			total++
			if c.Failure != nil || c.Error != nil {
				failed = append(failed, c.Package+": "+c.Name)
			}
		}
	}
	if total < 100 {
		t.Errorf("h2spec against %s ran %d cases; want its whole suite (145)\n%s", addr, total, out)
	}
	return failed
}
