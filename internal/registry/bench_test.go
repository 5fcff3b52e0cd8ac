package registry

import (
	"context"
	"fmt"
	"testing"

	"github.com/berth-dev/berth/internal/spec"
	"github.com/berth-dev/berth/internal/store"
)

// BenchmarkPutAt10k registers one static deployment (a host route, as
// bench/memory.sh does) into a registry of 10,000 over a real store, and
// deletes it again: the cost of a write should not grow with the table.
func BenchmarkPutAt10k(b *testing.B) {
	st, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	tabs := &tables{}
	reg := New(Options{Store: st, Publisher: tabs, Spec: spec.Options{BaseDomain: "apps.test"}})
	ctx := context.Background()
	if err := reg.Load(ctx); err != nil {
		b.Fatal(err)
	}
	for i := range 10_000 {
		id := fmt.Sprintf("mem-%05d", i)
		if _, _, err := reg.Put(ctx, static(id, id+".bench.test", "127.0.0.1:9"), PutOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := reg.Put(ctx, static("new", "new.bench.test", "127.0.0.1:9"), PutOptions{CreateOnly: true}); err != nil {
			b.Fatal(err)
		}
		if tabs.routes("new.bench.test") != "new" {
			b.Fatal("the new deployment is not routed")
		}
		if err := reg.Delete(ctx, "new"); err != nil {
			b.Fatal(err)
		}
	}
}
