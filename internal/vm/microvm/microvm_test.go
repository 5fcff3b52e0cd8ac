package microvm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/vm"
)

func TestAddresses(t *testing.T) {
	for _, tt := range []struct {
		guest, host   string
		want, wantErr string
	}{
		{"10.77.0.5/24", "10.77.0.1", "10.77.0.5/24", ""},
		{"10.77.0.5", "10.77.0.1", "10.77.0.5/24", ""},
		{"172.31.4.2/30", "172.31.4.1", "172.31.4.2/30", ""},
		{"172.31.4.2/31", "172.31.4.1", "", "guest address"},
		{"fd00::2/64", "10.77.0.1", "", "guest address"},
		{"10.77.0.5/24", "fd00::1", "", "host address"},
		{"10.77.0.5/24", "", "", "host address"},
	} {
		g, h, err := Addresses(tt.guest, tt.host)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Addresses(%q, %q) = %v, %v; want an error about the %s", tt.guest, tt.host, g, err, tt.wantErr)
			}
			continue
		}
		if err != nil || g.String() != tt.want || h.String() != tt.host {
			t.Errorf("Addresses(%q, %q) = %v, %v, %v; want %s, %s", tt.guest, tt.host, g, h, err, tt.want, tt.host)
		}
	}
}

func TestKernelIP(t *testing.T) {
	if got, want := KernelIP("172.31.4.2", "172.31.4.1", 30), "ip=172.31.4.2::172.31.4.1:255.255.255.252::eth0:off"; got != want {
		t.Errorf("KernelIP = %q, want %q", got, want)
	}
}

func TestMAC(t *testing.T) {
	a, b := MAC(0xb5, "berth-x-0123456789ab"), MAC(0xfc, "berth-x-0123456789ab")
	if !strings.HasPrefix(a, "02:b5:") || !strings.HasPrefix(b, "02:fc:") || a[5:] != b[5:] || len(a) != 17 {
		t.Errorf("MAC = %q, %q: want 02:<driver>: and the same id digest", a, b)
	}
	if MAC(0xb5, "berth-y-0123456789ab") == a {
		t.Error("two ids got one MAC")
	}
}

// TestEnded: an exit record on the console makes the replica exited with
// its code; without one it failed, saying whether its VMM ever ran, with
// the console's last lines.
func TestEnded(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "console.log")
	os.WriteFile(log, []byte("[    0.000000] Linux version 6.1.0\nbooting\n"), 0o600)
	inst := vm.Instance{PID: 9}
	if Ended(&inst, log, 9, "QEMU") || inst.State != vm.StateFailed || inst.PID != 0 ||
		!strings.HasPrefix(inst.Reason, "the guest ended without the agent recording an exit; console:") || !strings.Contains(inst.Reason, "booting") {
		t.Errorf("Ended without an exit record: %+v", inst)
	}
	inst = vm.Instance{}
	if Ended(&inst, filepath.Join(dir, "none"), 0, "QEMU") || inst.Reason != "the start of this replica was interrupted before QEMU ran" {
		t.Errorf("Ended of a start without a VMM: %+v", inst)
	}
	os.WriteFile(log, []byte("booting\r\n"+`{"t":"2025-01-02T03:04:08Z","s":"agent","m":"exit 3: exited with code 3"}`+"\r\n"), 0o600)
	inst = vm.Instance{PID: 9}
	if !Ended(&inst, log, 9, "QEMU") || inst.State != vm.StateExited || inst.ExitCode == nil || *inst.ExitCode != 3 || !strings.HasPrefix(inst.Reason, "exited with code 3") {
		t.Errorf("Ended with an exit record: %+v", inst)
	}
}

type oneTap struct{ guestIP, mac string }

func (n oneTap) CreateTap(ctx context.Context, id string) (string, string, string, string, error) {
	return "tap7", n.guestIP, "10.0.0.1", n.mac, nil
}
func (oneTap) DeleteTap(ctx context.Context, id string) error { return nil }

// TestCreateTap: the tap is handed to created before its addresses are
// checked (a bad address still leaves it recorded for cleanup), and a MAC
// is derived when the network gives none.
func TestCreateTap(t *testing.T) {
	id := "berth-x-0123456789ab"
	var recorded string
	record := func(tap string) error { recorded = tap; return nil }
	if _, err := CreateTap(t.Context(), oneTap{guestIP: "nonsense"}, id, 0xb5, record); err == nil || recorded != "tap7" {
		t.Errorf("CreateTap with a bad guest address = %v, recorded %q; want an error and tap7 recorded", err, recorded)
	}
	tap, err := CreateTap(t.Context(), oneTap{guestIP: "10.0.0.2/30"}, id, 0xb5, record)
	want := Tap{Name: "tap7", GuestIP: "10.0.0.2", PrefixLen: 30, HostIP: "10.0.0.1", MAC: MAC(0xb5, id)}
	if err != nil || tap != want {
		t.Errorf("CreateTap = %+v, %v; want %+v", tap, err, want)
	}
	if tap, _ := CreateTap(t.Context(), oneTap{guestIP: "10.0.0.2", mac: "02:00:00:00:00:01"}, id, 0xb5, record); tap.MAC != "02:00:00:00:00:01" || tap.PrefixLen != 24 {
		t.Errorf("CreateTap = %+v; want the network's MAC and a /24", tap)
	}
}

// TestGuestConfigUser: the image's user (Spec.User) reaches the guest's
// agent as --user, before COMMAND; no user, no flag.
func TestGuestConfigUser(t *testing.T) {
	spec := vm.Spec{Command: "exec app", User: &vm.User{UID: 1000, GID: 1000, Groups: []uint32{27}}}
	args := GuestConfig(spec, "r1", 8080, Guest{Listen: "vsock:1", Home: "/root"}).Args
	i := slices.Index(args, "--user")
	if i < 0 || i+1 >= len(args) || args[i+1] != "1000:1000:27" || i > slices.Index(args, "--") {
		t.Errorf("args %q: want --user 1000:1000:27 before the command", args)
	}
	spec.User = nil
	if args := GuestConfig(spec, "r1", 8080, Guest{Listen: "vsock:1", Home: "/root"}).Args; slices.Contains(args, "--user") {
		t.Errorf("args %q: --user without a Spec.User", args)
	}
}
