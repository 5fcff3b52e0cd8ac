package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/vm/drivers"
)

// TestWorkspaceKVM: a kvm deployment's vm.workspace is the replica's
// workspace directory shared into the guest at /workspace, writable by the
// image's user (not root here); what the guest wrote there is captured
// when the replica is evicted and is in the next replica's /workspace,
// still the user's. A set-user-ID bit the guest set is not carried into
// the snapshot, and the guest mounts the share nosuid,nodev. Two guest
// boots (TCG here).
func TestWorkspaceKVM(t *testing.T) { testWorkspaceGuests(t, "kvm") }

// TestWorkspaceLibvirt is TestWorkspaceKVM on the libvirt driver, with a
// libvirtd of the test's own.
func TestWorkspaceLibvirt(t *testing.T) { testWorkspaceGuests(t, "libvirt") }

func testWorkspaceGuests(t *testing.T, driver string) {
	k := startGuests(t, driver, v1.Config{User: "1000:1000"})
	id := "ws" + driver
	spec := fmt.Sprintf(`{"id":%q,"routes":[{"host":"%s.test"}],`+
		`"vm":{"driver":%q,"image":%q,"port":8080,"start_command":"exec httpd -f -p 8080 -h /","workspace":{"store":"local"}},`+
		`"scaling":{"min_replicas":1,"max_replicas":1,"boot_timeout_secs":120}}`, id, id, driver, k.ref)
	if code, b := k.call("POST", "/deployments", spec); code != http.StatusCreated {
		t.Fatalf("registering: %d %s", code, b)
	}
	status := func() apitype.DeploymentStatus {
		t.Helper()
		code, b := k.call("GET", "/deployments/"+id, "")
		var st apitype.DeploymentStatus
		if err := json.Unmarshal(b, &st); err != nil || code != http.StatusOK {
			t.Fatalf("status: %d %s", code, b)
		}
		return st
	}
	// ready waits for a ready replica other than not, failing at once if
	// the server's log says a replica failed (a TCG boot takes 5 to 30 s).
	ready := func(not string) string {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if line := replicaFailure(k.logs.String()); line != "" {
				t.Fatalf("a replica failed: %s", line)
			}
			for _, v := range status().VMs {
				if v.SandboxID != not && v.Healthy && !v.Draining {
					return v.SandboxID
				}
			}
		}
		t.Fatalf("no ready replica other than %q after 3 minutes", not)
		return ""
	}
	exec := func(sandbox, command string) apitype.ExecOutput {
		t.Helper()
		code, b := k.call("POST", "/deployments/"+id+"/exec", `{"command":`+jsonString(command)+`,"sandbox_id":"`+sandbox+`"}`)
		var out apitype.ExecOutput
		if err := json.Unmarshal(b, &out); err != nil || code != http.StatusOK {
			t.Fatalf("exec %q: %d %s", command, code, b)
		}
		return out
	}

	r1 := ready("")
	// The guest's view of the share: the image's user owns the
	// replica's copy, it is mounted nosuid,nodev, and the user can write
	// there, in a directory of its own too.
	out := exec(r1, `id -u; stat -c '%u:%g' /workspace; grep ' /workspace ' /proc/mounts; `+
		`echo kept > /workspace/f.txt && mkdir /workspace/d && echo deep > /workspace/d/g && `+
		`echo '#!/bin/sh' > /workspace/s && chmod 4755 /workspace/s && stat -c '%u:%g %a' /workspace/f.txt /workspace/s`)
	lines := strings.Split(strings.TrimSpace(out.Stdout), "\n")
	if out.ExitCode != 0 || len(lines) != 5 {
		t.Fatalf("in the first replica: %+v", out)
	}
	if lines[0] != "1000" || lines[1] != "1000:1000" {
		t.Errorf("the exec ran as uid %s, /workspace owned by %s; want 1000 and 1000:1000", lines[0], lines[1])
	}
	if f := strings.Fields(lines[2]); len(f) < 4 || f[2] != "9p" || !strings.Contains(","+f[3]+",", ",nosuid,") || !strings.Contains(","+f[3]+",", ",nodev,") {
		t.Errorf("/workspace in the guest's /proc/mounts: %q, want 9p mounted nosuid,nodev", lines[2])
	}
	if lines[3] != "1000:1000 644" || lines[4] != "1000:1000 4755" {
		t.Errorf("files the user wrote: %q, want 1000:1000 644 and 1000:1000 4755", lines[3:])
	}

	// Evicted: captured from the host directory, and the next replica
	// seeded with it.
	if code, b := k.call("DELETE", "/deployments/"+id+"/vms/"+r1+"?force=true", ""); code != http.StatusOK {
		t.Fatalf("evict: %d %s", code, b)
	}
	r2 := ready(r1)
	out = exec(r2, `find /workspace | sort; cat /workspace/f.txt /workspace/d/g && echo more >> /workspace/f.txt && stat -c '%u:%g %a' /workspace/f.txt /workspace/d /workspace/s`)
	if out.ExitCode != 0 || out.Stdout != "/workspace\n/workspace/d\n/workspace/d/g\n/workspace/f.txt\n/workspace/s\n"+
		"kept\ndeep\n1000:1000 644\n1000:1000 755\n1000:1000 755\n" {
		t.Errorf("in the next replica: %+v\nwant the guest's files and nothing else (no lease file of berth's), kept, the user's, writable, and s without its set-user-ID bit", out)
	}
	if ws := status().Workspace; ws == nil || ws.CapturedFrom == nil || *ws.CapturedFrom != r1 || ws.Files != 3 {
		t.Errorf("workspace status %+v, want captured from %s with 3 files", ws, r1)
	}

	if code, b := k.call("DELETE", "/deployments/"+id, ""); code/100 != 2 {
		t.Fatalf("delete: %d %s", code, b)
	}
	var left []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if left = kvmReplicas(drivers.StateDirs(k.data)[driver]); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("the deleted deployment left replicas %v", left)
	}
}
