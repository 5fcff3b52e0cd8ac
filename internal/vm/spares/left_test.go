package spares_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/berth-dev/berth/internal/vm/spares"
)

// TestLeft: only directories named with the prefix are spares left over.
func TestLeft(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{".spare-a", ".spare-b", "berth-app-000000000001"} {
		os.Mkdir(filepath.Join(root, d), 0o700)
	}
	os.WriteFile(filepath.Join(root, ".spare-file"), nil, 0o600)
	if got := spares.Left(root, ".spare-"); !slices.Equal(got, []string{".spare-a", ".spare-b"}) {
		t.Errorf("Left = %q, want the two spare directories", got)
	}
	if got := spares.Left(filepath.Join(root, "none"), ".spare-"); got != nil {
		t.Errorf("Left of a missing root = %q", got)
	}
}
