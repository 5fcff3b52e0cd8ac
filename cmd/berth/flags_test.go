package main

import (
	"bytes"
	"flag"
	"io"
	"os"
	"strings"
	"testing"
)

// TestAllowLocalReposFlag: --allow-local-repos is the one policy for local
// build and workflow repositories; the two flags (and variables) it
// replaced still turn it on, each with a warning, and the new flag given
// explicitly wins.
func TestAllowLocalReposFlag(t *testing.T) {
	cases := []struct {
		name  string
		args  []string
		env   map[string]string
		want  bool
		warns []string
	}{
		{name: "default", want: false},
		{name: "new flag", args: []string{"--allow-local-repos"}, want: true},
		{name: "new variable", env: map[string]string{"BERTH_ALLOW_LOCAL_REPOS": "true"}, want: true},
		{name: "old build flag", args: []string{"--build-allow-local"}, want: true, warns: []string{"--build-allow-local is deprecated"}},
		{name: "old workflow flag", args: []string{"--workflow-allow-local"}, want: true, warns: []string{"--workflow-allow-local is deprecated"}},
		{name: "old variable", env: map[string]string{"BERTH_WORKFLOW_ALLOW_LOCAL": "1"}, want: true, warns: []string{"BERTH_WORKFLOW_ALLOW_LOCAL is deprecated"}},
		{name: "new flag wins", args: []string{"--build-allow-local", "--allow-local-repos=false"}, want: false, warns: []string{"--build-allow-local is deprecated"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, k := range []string{"BERTH_ALLOW_LOCAL_REPOS", "BERTH_BUILD_ALLOW_LOCAL", "BERTH_WORKFLOW_ALLOW_LOCAL"} {
				if v, ok := c.env[k]; ok {
					t.Setenv(k, v)
				} else {
					unsetenv(t, k)
				}
			}
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			policy := allowLocalReposFlag(fs)
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			var w bytes.Buffer
			if got := policy(&w); got != c.want {
				t.Errorf("policy = %v, want %v", got, c.want)
			}
			lines := strings.Count(w.String(), "\n")
			if lines != len(c.warns) {
				t.Errorf("%d warnings, want %d: %q", lines, len(c.warns), w.String())
			}
			for _, s := range c.warns {
				if !strings.Contains(w.String(), s) || !strings.Contains(w.String(), "--allow-local-repos") && !strings.Contains(w.String(), "BERTH_ALLOW_LOCAL_REPOS") {
					t.Errorf("warnings %q do not say %q and name the new flag", w.String(), s)
				}
			}
		})
	}
}

// unsetenv removes k for the rest of the test (t.Setenv restores it).
func unsetenv(t *testing.T, k string) {
	t.Setenv(k, "")
	os.Unsetenv(k)
}
