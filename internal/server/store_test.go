package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/etcdstore"
)

// putWorkspaceWrong has one method of Store, with another signature.
type putWorkspaceWrong struct{}

func (putWorkspaceWrong) PutWorkspace(context.Context, string) error { return nil }

// TestStoreBackends: the SQLite store offers all of Store, missingStoreMethods
// sees what a type lacks, and it logs what *etcdstore.Store lacks so far
// (its method groups are landing one by one; once all have, a
// compile-time check replaces the log).
func TestStoreBackends(t *testing.T) {
	if m := missingStoreMethods((*store.Store)(nil)); len(m) != 0 {
		t.Fatalf("*store.Store lacks %v", m)
	}
	n := reflect.TypeFor[Store]().NumMethod()
	if m := missingStoreMethods(struct{}{}); len(m) != n || !slices.Contains(m, "PutWorkspace") {
		t.Fatalf("struct{} lacks %d methods of %d: %v", len(m), n, m)
	}
	if m := missingStoreMethods(nil); len(m) != n {
		t.Fatalf("nil lacks %d methods of %d", len(m), n)
	}
	m := missingStoreMethods(putWorkspaceWrong{})
	i := slices.IndexFunc(m, func(s string) bool { return strings.HasPrefix(s, "PutWorkspace") })
	if len(m) != n || i < 0 || !strings.Contains(m[i], "Store wants") {
		t.Fatalf("a PutWorkspace of another signature: %v", m)
	}

	lack := missingStoreMethods((*etcdstore.Store)(nil))
	t.Logf("*etcdstore.Store lacks %d of the %d methods of server.Store:\n\t%s", len(lack), n, strings.Join(lack, "\n\t"))
}

// TestGivenStore: with Options.Store the server keeps its records there,
// not in a store of its own in the data directory, and leaves it open
// when Run returns.
func TestGivenStore(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dir := t.TempDir()
	h := startWith(t, dir, func(o *Options) { o.Store = st })
	var minted apitype.MintedToken
	if r := h.json("POST", "/tokens", `{"name":"given","admin":"admin","deployments":["*"]}`); r.code != 201 || json.Unmarshal(r.body, &minted) != nil {
		t.Fatalf("mint: %d %s", r.code, r.body)
	}
	h.stop()
	if _, err := os.Stat(filepath.Join(dir, store.FileName)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the server opened a store in its data directory: %v", err)
	}
	toks, err := st.Tokens(context.Background()) // fails if the server closed st
	if err != nil {
		t.Fatalf("the given store after Run: %v", err)
	}
	if !slices.ContainsFunc(toks, func(x store.Token) bool { return x.Name == "given" }) {
		t.Fatalf("the minted token is not in the given store: %+v", toks)
	}
}
