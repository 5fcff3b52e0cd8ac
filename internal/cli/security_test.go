package cli

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/berth-dev/berth/apitype"
)

// TestSecurityLive: the SIEM and guard commands against a real server. A
// view token trying admin writes again and again raises auth.scope-denied;
// get alerts shows it, respond lists its actions and puts one in force;
// block, allow, get rules and delete rule manage rules by hand.
func TestSecurityLive(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	srv := liveServer(t)
	op := []string{"--server", srv, "--password", "opw"}
	run := func(args ...string) string { t.Helper(); return mustRun(t, "", append(op, args...)...) }

	if code, _, errs := berth(t, "", append(op, "get", "alerts")...); code != 0 || !strings.Contains(errs, "No alerts.") {
		t.Fatalf("get alerts on a quiet server: exit %d, %q", code, errs)
	}
	view := strings.TrimSpace(run("token", "mint", "peek", "--admin", "view", "--all-deployments"))
	for range 10 {
		code, _, _ := berth(t, `{"id":"x","upstreams":["127.0.0.1:1"]}`, "--server", srv, "--token", view, "apply", "-f", "-")
		if code == 0 {
			t.Fatal("a view token applied a deployment")
		}
	}
	// The SIEM analyses in batches off the request path: wait for it,
	// within a bound that only turns a missing alert into a failure.
	var alert apitype.SecurityAlert
	for deadline := time.Now().Add(20 * time.Second); alert.ID == 0; {
		var resp apitype.SecurityResponse
		if err := json.Unmarshal([]byte(run("get", "alerts", "-o", "json")), &resp); err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.Alerts {
			if a.Rule == "auth.scope-denied" {
				alert = a
			}
		}
		if alert.ID == 0 && time.Now().After(deadline) {
			t.Fatalf("no auth.scope-denied alert: %+v", resp.Alerts)
		}
		time.Sleep(20 * time.Millisecond)
	}
	id := strconv.FormatInt(alert.ID, 10)
	if out := run("get", "alerts", "--severity", "medium"); !strings.Contains(out, "auth.scope-denied") || !strings.Contains(out, "SEVERITY") {
		t.Errorf("get alerts:\n%s", out)
	}
	if out := run("get", "alerts", "--severity", "critical"); strings.Contains(out, "auth.scope-denied") {
		t.Errorf("get alerts --severity critical shows a medium one:\n%s", out)
	}
	if code, _, errs := berth(t, "", append(op, "get", "alerts", "--severity", "dire")...); code != 2 || !strings.Contains(errs, "--severity") {
		t.Errorf("a bad --severity: exit %d, %q", code, errs)
	}
	out := run("respond", id)
	if !strings.Contains(out, "block-client") || !strings.Contains(out, "check:") || !strings.Contains(out, "admin API") {
		t.Errorf("respond %s (the admin plane's caveat among it):\n%s", id, out)
	}
	if out := run("respond", id, "block-client"); !strings.HasPrefix(out, "rule/") || !strings.Contains(out, "from 127.0.0.1") {
		t.Errorf("respond %s block-client: %q", id, out)
	}
	if code, _, errs := berth(t, "", append(op, "respond", id, "nuke")...); code != 2 || !strings.Contains(errs, "block-client") {
		t.Errorf("respond with an unknown action: exit %d, %q", code, errs)
	}

	blocked := run("block", "203.0.113.0/24", "--for", "1h", "-d", "web", "--note", "abuse report")
	ruleID, _, _ := strings.Cut(strings.TrimPrefix(blocked, "rule/"), ":")
	if !strings.Contains(blocked, "block from 203.0.113.0/24, to web") {
		t.Errorf("block: %q", blocked)
	}
	run("allow", "192.0.2.10")
	rules := run("get", "rules")
	for _, want := range []string{ruleID, "abuse report", "from 192.0.2.10", "allow", "HITS"} {
		if !strings.Contains(rules, want) {
			t.Errorf("get rules lacks %q:\n%s", want, rules)
		}
	}
	if code, _, errs := berth(t, "", append(op, "block", "not-an-address")...); code != 2 || !strings.Contains(errs, "not an address") {
		t.Errorf("block not-an-address: exit %d, %q", code, errs)
	}
	if out := run("delete", "rule", ruleID); !strings.Contains(out, "rule/"+ruleID+" deleted") {
		t.Errorf("delete rule: %q", out)
	}
	if rules := run("get", "rules"); strings.Contains(rules, ruleID) {
		t.Errorf("the deleted rule is listed:\n%s", rules)
	}
	if code, _, errs := berth(t, "", append(op, "delete", "rule", ruleID)...); code != 1 || !strings.Contains(errs, "no rule") {
		t.Errorf("delete a missing rule: exit %d, %q", code, errs)
	}
}
