// Package contracttest reads the admin API's JSON contract (types.d.ts, the
// TypeScript declarations app-lb's clients are built from) and the
// Computer contract (shared/contract/computer/dist, Zod 4 declaration
// output; see [LoadComputer]) with one parser, and checks Go types and real
// JSON documents against them.
//
// It is for tests only: import it from _test.go files. The contract is the
// authority on the wire shape; these checks are how berth proves it emits no
// key the contract does not declare and that its Go types name every field
// the contract does.
package contracttest

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// EnvPath names the environment variable that, when set, is the path of the
// types.d.ts to load instead of searching for one.
const EnvPath = "BERTH_CONTRACT"

// relPath is where the contract sits relative to the folder the repository is
// cloned into: the repository is X/main (or X/<anything>) and the contract
// X/shared/....
const relPath = "shared/contract/hws/dist/types.d.ts"

// Find returns the path of types.d.ts: $BERTH_CONTRACT if set, otherwise the
// first <dir>/shared/contract/hws/dist/types.d.ts found walking up from the
// working directory (tests run in their package directory, somewhere below
// the repository root, which sits next to shared/).
func Find() (string, error) {
	if p := os.Getenv(EnvPath); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("contracttest: $%s: %w", EnvPath, err)
		}
		return p, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("contracttest: %w", err)
	}
	for dir := wd; ; {
		p := filepath.Join(dir, relPath)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", fmt.Errorf("contracttest: no %s in %s or any parent directory (set $%s to the file)", relPath, wd, EnvPath)
}

// Load finds (see [Find]) and parses the contract.
func Load() (*Contract, error) {
	p, err := Find()
	if err != nil {
		return nil, err
	}
	src, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("contracttest: %w", err)
	}
	c, err := Parse(p, src)
	if err != nil {
		return nil, fmt.Errorf("contracttest: %w", err)
	}
	c.Path = p
	return c, nil
}

// MustLoad is [Load] for tests: it fails t (rather than skipping) when the
// contract cannot be found or parsed, since CI always has it.
func MustLoad(t testing.TB) *Contract {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatalf("loading the admin API contract: %v", err)
	}
	return c
}

// Problems is the error [Contract.CheckJSON] returns: one line per key path
// the contract does not allow.
type Problems []string

// Error lists every problem, one per line.
func (p Problems) Error() string {
	s := fmt.Sprintf("%d contract problem(s):", len(p))
	for _, l := range p {
		s += "\n\t" + l
	}
	return s
}

// errUnknownType is returned for a type name the contract does not declare.
var errUnknownType = errors.New("type not declared in the contract")

// documented is documented.d.ts: the responses app-lb documents and its
// clients decode that types.d.ts does not declare.
//
//go:embed documented.d.ts
var documented []byte

// Documented parses documented.d.ts, the declarations (in the contract's
// style) of responses app-lb documents but the contract does not declare,
// such as `GET /images`. Check berth's JSON for those against it, as for
// the contract's types.
func Documented() (*Contract, error) {
	c, err := Parse("documented.d.ts", documented)
	if err != nil {
		return nil, fmt.Errorf("contracttest: %w", err)
	}
	return c, nil
}

// MustDocumented is [Documented] for tests.
func MustDocumented(t testing.TB) *Contract {
	t.Helper()
	c, err := Documented()
	if err != nil {
		t.Fatalf("parsing the documented declarations: %v", err)
	}
	return c
}
