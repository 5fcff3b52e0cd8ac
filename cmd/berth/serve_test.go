package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTakeSecrets: berth's secrets leave its environment once read, so no
// child inherits them (issue 9: a sandbox printed BERTH_ADMIN_PASSWORD).
func TestTakeSecrets(t *testing.T) {
	t.Setenv("BERTH_ADMIN_PASSWORD", "hunter2")
	t.Setenv("BERTH_SECRET_KEY", "sealed")
	got := takeSecrets()
	if got["BERTH_ADMIN_PASSWORD"] != "hunter2" || got["BERTH_SECRET_KEY"] != "sealed" {
		t.Errorf("takeSecrets = %v", got)
	}
	for _, name := range secretEnv {
		if v, ok := os.LookupEnv(name); ok {
			t.Errorf("%s=%q is still in berth's environment", name, v)
		}
	}
	out, err := exec.Command("env").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "hunter2") || strings.Contains(string(out), "sealed") {
		t.Errorf("a child of berth inherits its secrets:\n%s", out)
	}
}
