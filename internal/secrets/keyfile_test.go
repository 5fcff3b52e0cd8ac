package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyFileReadWrite: ReadKeyFile makes no file where there is none;
// WriteKeyFile writes one LoadKey reads back as the same key, mode 0600,
// replacing one there; a key file others may read is refused.
func TestKeyFileReadWrite(t *testing.T) {
	d := t.TempDir()
	if _, ok, err := ReadKeyFile(d); ok || err != nil {
		t.Fatalf("no key file: %v %v", ok, err)
	}
	if _, err := os.Stat(filepath.Join(d, KeyFileName)); !os.IsNotExist(err) {
		t.Fatalf("ReadKeyFile made a key file: %v", err)
	}
	first, _, err := LoadKey("", d)
	if err != nil {
		t.Fatal(err)
	}
	k, _ := ParseKey("the fleet's")
	if k == first {
		t.Fatal("the test's keys are the same")
	}
	if err := WriteKeyFile(d, k); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(d, KeyFileName)
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("written: %v %v", st, err)
	}
	if got, _, err := LoadKey("", d); err != nil || got != k {
		t.Fatalf("LoadKey after WriteKeyFile: same %v, %v", got == k, err)
	}
	if got, ok, err := ReadKeyFile(d); !ok || err != nil || got != k {
		t.Fatalf("ReadKeyFile: %v %v", ok, err)
	}
	os.Chmod(path, 0o644)
	if _, ok, err := ReadKeyFile(d); ok || err == nil || !strings.Contains(err.Error(), "readable by its owner only") {
		t.Fatalf("a 0644 key file: %v %v", ok, err)
	}
}
