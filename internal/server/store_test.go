package server

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/store"
)

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
