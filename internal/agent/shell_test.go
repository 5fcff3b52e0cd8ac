//go:build linux

package agent_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/berth-dev/berth/internal/agent"
)

// TestExecShellFreeSameResult runs command lines the agent runs without the
// shell, and some it does not, both as command and as argv /bin/sh -c LINE
// (always the shell), and checks the results are the same.
func TestExecShellFreeSameResult(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	script := "#!/bin/sh\necho \"$0|$#|$1|$2|$GREETING|$(pwd)\"\necho err >&2\nexit 4\n"
	os.WriteFile(filepath.Join(bin, "report"), []byte(script), 0o755)
	env := map[string]string{"PATH": bin + ":" + os.Getenv("PATH"), "GREETING": "hi"}
	lines := []string{
		"report a  b",         // found in the request's PATH
		"exec report x",       // leading exec
		"bin/report rel",      // relative to cwd
		"./bin/report --x=1",  // relative with ./
		"cat missing-file",    // a failing program
		"no-such-program arg", // not found: the shell's 127
		"report $GREETING",    // expansion: the shell
		"echo -n a",           // builtin: the shell
	}
	for _, line := range lines {
		direct, err := c.Exec(t.Context(), agent.ExecRequest{Command: line, Cwd: dir, Env: env})
		if err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		shell, err := c.Exec(t.Context(), agent.ExecRequest{Argv: []string{"/bin/sh", "-c", line}, Cwd: dir, Env: env})
		if err != nil {
			t.Fatalf("%q through the shell: %v", line, err)
		}
		// The interleaving of the two streams is a race either way.
		direct.DurationMS, shell.DurationMS = 0, 0
		direct.Output, shell.Output = "", ""
		if direct != shell {
			t.Errorf("%q: %+v, through the shell %+v", line, direct, shell)
		}
	}
}
