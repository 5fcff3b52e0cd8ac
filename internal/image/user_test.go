package image

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestResolveUser: names and groups resolve through the image's own
// account files; numbers need none; an unknown name is an error, and a
// symlinked /etc/passwd cannot make berth read a host file.
func TestResolveUser(t *testing.T) {
	rootfs := t.TempDir()
	os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n# comment\napp:x:1001:1002:App:/home/app:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(rootfs, "etc/group"), []byte("root:x:0:\napp:x:1002:\nextra:x:1003:other,app\nstaff:x:50:\n"), 0o644)
	for spec, want := range map[string]User{
		"1000:1000":  {UID: 1000, GID: 1000},
		"1000":       {UID: 1000, GID: 0},
		"app":        {UID: 1001, GID: 1002, Groups: []uint32{1003}, Home: "/home/app"},
		"app:staff":  {UID: 1001, GID: 50, Groups: []uint32{1003}, Home: "/home/app"},
		"1001":       {UID: 1001, GID: 1002, Groups: []uint32{1003}, Home: "/home/app"},
		"root":       {UID: 0, GID: 0, Home: "/root"},
		"1001:extra": {UID: 1001, GID: 1003, Home: "/home/app"},
		"4242:4343":  {UID: 4242, GID: 4343},
		"app:1003":   {UID: 1001, GID: 1003, Home: "/home/app"},
	} {
		got, err := ResolveUser(rootfs, spec)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ResolveUser(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for spec, why := range map[string]string{
		"nobody":    `no user "nobody"`,
		"app:wheel": `no group "wheel"`,
		":1":        "want NAME",
		"app:":      "want NAME",
	} {
		if _, err := ResolveUser(rootfs, spec); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("ResolveUser(%q): %v, want %q", spec, err, why)
		}
	}

	// /etc/passwd a symlink to the host's: refused, not read.
	esc := t.TempDir()
	os.MkdirAll(filepath.Join(esc, "etc"), 0o755)
	os.Symlink("/etc/passwd", filepath.Join(esc, "etc/passwd"))
	if u, err := ResolveUser(esc, "root"); err == nil {
		t.Errorf("a symlink out of the image was read: %+v", u)
	}
	// No account files at all: numbers still work.
	if u, err := ResolveUser(t.TempDir(), "5:6"); err != nil || u.UID != 5 || u.GID != 6 {
		t.Errorf("numeric user without /etc/passwd: %+v, %v", u, err)
	}
}
