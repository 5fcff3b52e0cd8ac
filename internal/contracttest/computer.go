package contracttest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// EnvComputerPath names the environment variable that, when set, is the
// Computer contract's dist folder (holding fleet/wire.d.ts) to load
// instead of searching for one.
const EnvComputerPath = "BERTH_COMPUTER_CONTRACT"

// computerRel is the Computer contract's dist folder, relative to the
// folder the repository is cloned into (as relPath is).
const computerRel = "shared/contract/computer/dist"

// ComputerFiles are the Computer contract's declaration files that
// describe wire shapes, in dependency order (runtime-usage.d.ts imports
// wire.d.ts's types).
var ComputerFiles = []string{"fleet/wire.d.ts", "fleet/slots.d.ts", "fleet/runtime-usage.d.ts", "host-config.d.ts"}

// FindComputer returns the Computer contract's dist folder:
// $BERTH_COMPUTER_CONTRACT if set, otherwise the first
// <dir>/shared/contract/computer/dist walking up from the working
// directory.
func FindComputer() (string, error) {
	if p := os.Getenv(EnvComputerPath); p != "" {
		if _, err := os.Stat(filepath.Join(p, ComputerFiles[0])); err != nil {
			return "", fmt.Errorf("contracttest: $%s: %w", EnvComputerPath, err)
		}
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("contracttest: %w", err)
	}
	for dir := wd; ; {
		p := filepath.Join(dir, computerRel)
		if _, err := os.Stat(filepath.Join(p, ComputerFiles[0])); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("contracttest: no %s in %s or any parent directory (set $%s to the folder)", computerRel, wd, EnvComputerPath)
}

// LoadComputer finds (see [FindComputer]) and parses the Computer
// contract's files ([ComputerFiles]) into one Contract whose names are
// the files' exports: the schema constants (computerFactSchema, ...) and
// the types (ComputerFact, ...). Its literals are strict: a discriminator
// or enum value the contract does not list is a problem.
func LoadComputer() (*Contract, error) {
	dir, err := FindComputer()
	if err != nil {
		return nil, err
	}
	var srcs []Source
	for _, f := range ComputerFiles {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return nil, fmt.Errorf("contracttest: %w", err)
		}
		srcs = append(srcs, Source{Name: f, Src: b})
	}
	c, err := ParseFiles(srcs...)
	if err != nil {
		return nil, fmt.Errorf("contracttest: %w", err)
	}
	c.Path = dir
	c.StrictLiterals = true
	return c, nil
}

// MustLoadComputer is [LoadComputer] for tests: it fails t (rather than
// skipping) when the contract cannot be found or parsed.
func MustLoadComputer(t testing.TB) *Contract {
	t.Helper()
	c, err := LoadComputer()
	if err != nil {
		t.Fatalf("loading the Computer contract: %v", err)
	}
	return c
}
