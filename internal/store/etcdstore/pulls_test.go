package etcdstore

import (
	"encoding/json"
	"testing"

	"github.com/berth-dev/berth/internal/store"
	"github.com/berth-dev/berth/internal/store/storetest"
)

// TestPullsSuite runs the pulls suite on a real etcd member. The images
// rows are not kept by this package yet: the suite's image is written at
// the key PutPulledImage and PutImageConfig require, images/<name>.
func TestPullsSuite(t *testing.T) {
	open, cli := openJobsSuite(t)
	storetest.RunPulls(t, func(t *testing.T) storetest.PullsBackend { return open(t) },
		func(t *testing.T, b storetest.PullsBackend, name string) {
			s := b.(*Store)
			body, err := json.Marshal(store.Image{Name: name, Digest: "sha256:" + name, CreatedAt: norm(s.now())})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Put(t.Context(), s.imagesRowKey(name), string(body)); err != nil {
				t.Fatal(err)
			}
		})
}
