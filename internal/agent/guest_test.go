package agent_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/agent"
)

// writeConfig writes c as a config drive image and returns its path.
func writeConfig(t *testing.T, dir string, c agent.GuestConfig) string {
	t.Helper()
	b, err := agent.EncodeGuestConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%512 != 0 {
		t.Fatalf("EncodeGuestConfig returned %d bytes, want a multiple of 512", len(b))
	}
	p := filepath.Join(dir, "config.img")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMainGuestConfig runs the agent as a VM driver does, with everything
// in a config drive: flags, COMMAND, the whole environment and files.
func TestMainGuestConfig(t *testing.T) {
	dir := shortDir(t)
	log, exit := filepath.Join(dir, "out.log"), filepath.Join(dir, "exit.json")
	lease := filepath.Join(dir, "run", "berth", "lease")
	cfg := writeConfig(t, dir, agent.GuestConfig{
		Args: []string{"--listen", "unix:" + filepath.Join(dir, "a.sock"), "--log", log, "--exit-file", exit,
			"--lease-file", lease, "--workdir", dir,
			"--", "sh", "-c", `echo "greeting=$GREETING"; echo "mode=${BERTH_AGENT_TEST_MODE:-unset}"; cat ` + lease + `; exit 4`},
		Env:   []string{"PATH=" + os.Getenv("PATH"), "GREETING=hello there"},
		Files: map[string]string{lease: "99999999999\n"},
	})
	cmd, stderr := agentCmd(t, "--config", cfg)
	if code := exitCode(t, cmd, stderr); code != 4 {
		t.Fatalf("agent exit code %d, want 4 (stderr %s)", code, stderr)
	}
	if ef := readExitFile(t, exit); *ef.ExitCode != 4 {
		t.Errorf("exit file %+v, want code 4", ef)
	}
	lines := readLog(t, log)
	// The environment is the config's alone: the variable that made the
	// test binary the agent is gone.
	for _, want := range []string{"greeting=hello there", "mode=unset", "99999999999"} {
		if !hasLine(lines, "stdout", want) {
			t.Errorf("log lacks stdout line %q: %+v", want, lines)
		}
	}
	fi, err := os.Stat(lease)
	if err != nil {
		t.Fatalf("the config's file was not written: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config file mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestMainGuestConfigErrors(t *testing.T) {
	dir := shortDir(t)
	good := agent.GuestConfig{Args: []string{"--listen", "unix:" + filepath.Join(dir, "a.sock")}}
	noArgs := writeConfig(t, t.TempDir(), agent.GuestConfig{})
	badEnv := writeConfig(t, t.TempDir(), agent.GuestConfig{Args: good.Args, Env: []string{"NOEQUALS"}})
	relFile := writeConfig(t, t.TempDir(), agent.GuestConfig{Args: good.Args, Files: map[string]string{"rel/path": "x"}})
	garbage := filepath.Join(t.TempDir(), "garbage")
	os.WriteFile(garbage, []byte("not json"), 0o600)
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--config", writeConfig(t, t.TempDir(), good), "sh"}, "COMMAND belongs in the config"},
		{[]string{"--config", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"--config", garbage}, "invalid character"},
		{[]string{"--config", noArgs}, "no agent arguments"},
		{[]string{"--config", badEnv}, "bad environment entry"},
		{[]string{"--config", relFile}, "not absolute"},
		{[]string{"--vm-init", "--listen", "unix:" + filepath.Join(dir, "b.sock")}, "not PID 1"},
	}
	for _, tt := range tests {
		cmd, stderr := agentCmd(t, tt.args...)
		if code := exitCode(t, cmd, stderr); code != 2 || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("agent %q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// TestMainVsock listens on a vsock port where the host has AF_VSOCK (a VM
// guest, or a host with the vsock modules); connecting needs a hypervisor,
// so only the listening side is checked here.
func TestMainVsock(t *testing.T) {
	dir := shortDir(t)
	log := filepath.Join(dir, "out.log")
	port := 20000 + os.Getpid()%20000
	addr := fmt.Sprintf("vsock:%d", port)
	cmd, stderr := agentCmd(t, "--listen", addr, "--log", log, "--", "true")
	code := exitCode(t, cmd, stderr)
	if code != 0 && strings.Contains(stderr.String(), "vsock socket") {
		t.Skipf("no AF_VSOCK on this host: %s", stderr)
	}
	if code != 0 {
		t.Fatalf("agent --listen %s: exit %d, stderr %s", addr, code, stderr)
	}
	b, _ := os.ReadFile(log)
	if !bytes.Contains(b, []byte("agent listening on "+addr)) {
		t.Errorf("log does not say the agent listened on %s:\n%s", addr, b)
	}

	cmd, stderr = agentCmd(t, "--listen", "vsock:port")
	if code := exitCode(t, cmd, stderr); code != 1 || !strings.Contains(stderr.String(), "decimal port") {
		t.Errorf("--listen vsock:port: exit %d, stderr %q; want 1 and a word on the port", code, stderr)
	}
}
