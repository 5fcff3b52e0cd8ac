package server

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
)

// TestVMExecSandboxed is issue 9's attack end to end: an exec in a
// process deployment ran as uid 0, saw the host's /proc and printed
// BERTH_ADMIN_PASSWORD from /proc/<berth pid>/environ. A host process
// started with the password in its environment stands in for berth.
func TestVMExecSandboxed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the process driver sandboxes replicas only as root")
	}
	t.Setenv("BERTH_ADMIN_PASSWORD", "hunter2-e2e")
	berth := exec.Command("sleep", "600")
	berth.Env = []string{"BERTH_ADMIN_PASSWORD=hunter2-e2e"}
	if err := berth.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { berth.Process.Kill(); berth.Wait() })

	h := start(t, "")
	if r := h.json("POST", "/deployments", vmSpec("sbx", `,"scaling":{"min_replicas":0,"max_replicas":1}`)); r.code != 201 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	script := `id -u; cat /proc/*/environ 2>/dev/null | tr '\0' '\n' | grep -c hunter2-e2e; env | grep -c hunter2-e2e; cat /proc/*/cmdline 2>/dev/null | tr '\0' '\n' | grep -c -- '-test[.]paniconexi[t]0'`
	r := h.json("POST", "/deployments/sbx/exec", `{"command":`+jsonString(script)+`}`)
	if r.code != 200 {
		t.Fatalf("exec: %d %s", r.code, r.body)
	}
	var out apitype.ExecOutput
	json.Unmarshal(r.body, &out)
	lines := strings.Fields(out.Stdout)
	if len(lines) != 4 {
		t.Fatalf("exec said %+v", out)
	}
	if lines[0] == "0" {
		t.Error("an exec in a process deployment runs as uid 0")
	}
	if lines[1] != "0" || lines[2] != "0" {
		t.Errorf("the exec finds BERTH_ADMIN_PASSWORD (in /proc/*/environ: %s, in its env: %s)", lines[1], lines[2])
	}
	if lines[3] != "0" {
		t.Error("the exec sees berth's own process in /proc")
	}
}
