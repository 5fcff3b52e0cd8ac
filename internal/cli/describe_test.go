package cli

import (
	"strings"
	"testing"
	"time"
)

// TestDescribeShowsStartFailure: describe of a vm deployment whose creates
// fail (an env_from secret that does not exist) shows the failing streak,
// when the next attempt is, and the last create error, from a real server.
func TestDescribeShowsStartFailure(t *testing.T) {
	srv := liveServer(t)
	t.Setenv("BERTH_PASSWORD", "opw")
	mustRun(t, `{"id":"late","routes":[{"host":"late.test"}],"vm":{"driver":"process","start_command":"true",`+
		`"env_from":[{"secret":"later","key":"password"}]},"scaling":{"min_replicas":1}}`, "--server", srv, "apply", "-f", "-")
	var out string
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out, "Last create error:") {
		if time.Now().After(deadline) {
			t.Fatalf("describe never showed the failed create:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
		out = mustRun(t, "", "--server", srv, "describe", "deployment", "late")
	}
	if !strings.Contains(out, "Start failures:") || !strings.Contains(out, "1 in a row; next attempt in ") {
		t.Errorf("describe lacks the failing streak and the next attempt:\n%s", out)
	}
	if !strings.Contains(out, "port $PORT (picked per replica)") {
		t.Errorf("a spec without vm.port is described as port 0, not $PORT:\n%s", out)
	}
	if !strings.Contains(out, `"later"`) {
		t.Errorf("the last create error does not name the missing secret:\n%s", out)
	}
	// A static deployment has no such lines.
	mustRun(t, `{"id":"st","routes":[{"host":"st.test"}],"upstreams":["127.0.0.1:1"]}`, "--server", srv, "apply", "-f", "-")
	if out := mustRun(t, "", "--server", srv, "describe", "deployment", "st"); strings.Contains(out, "create error") {
		t.Errorf("static deployment:\n%s", out)
	}
}
