package image

import (
	"crypto/rand"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/berth-dev/berth/internal/image/registrytest"
	"github.com/berth-dev/berth/internal/store"
)

// BenchmarkPull pulls a 100 MiB image of 5 gzip-compressed layers (as
// registries serve them) from a loopback docker-registry into a fresh
// store each round, resolve to recorded (Pull returns once the pull is in
// the catalog, its files durable), and writes the same number of bytes to
// one file with one fsync in the same directory, so the pull's throughput
// reads against the disk's:
//
//	go test -run '^$' -bench Pull -benchtime 3x ./internal/image/
//
// Each layer is 40 files of 512 KiB, half text-like (words of a small
// vocabulary: gzip takes them to about a third) and half random (as
// already-compressed binaries and assets are: gzip cannot shrink them),
// so decompression costs what it costs on real images; compress-ratio reports
// compressed/uncompressed bytes. pull-MiB/s counts uncompressed bytes.
// Pull/gzip is what registries serve most; Pull/zstd is the same content
// in OCI tar+zstd layers, whose decompression costs a fraction of gzip's.
//
// It also reports the bytes on disk of two images sharing the 80 MiB of
// their first four layers: the shared layers are stored once.
func BenchmarkPull(b *testing.B) {
	b.Run("gzip", func(b *testing.B) { benchPull(b, registrytest.Layer) })
	b.Run("zstd", func(b *testing.B) { benchPull(b, registrytest.ZstdLayer) })
}

func benchPull(b *testing.B, mkLayer func(testing.TB, ...registrytest.File) v1.Layer) {
	const layers, files, per = 5, 40, 512 << 10
	reg := registrytest.Start(b, registrytest.Options{})
	var ls []v1.Layer
	var gz int64
	rng := mrand.New(mrand.NewPCG(1, 2))
	for i := range layers {
		var fs []registrytest.File
		for j := range files {
			body := make([]byte, per)
			if j%2 == 0 {
				textLike(rng, body)
			} else {
				rand.Read(body)
			}
			fs = append(fs, registrytest.File{Name: fmt.Sprintf("data/%d/%d.bin", i, j), Body: body})
		}
		l := mkLayer(b, fs...)
		n, err := l.Size()
		if err != nil {
			b.Fatal(err)
		}
		gz += n
		ls = append(ls, l)
	}
	ref := reg.Push(b, "bench/big:v1", registrytest.Image(b, v1.Config{}, ls...))
	other := registrytest.Layer(b, registrytest.File{Name: "other.txt", Body: []byte("a different top layer")})
	ref2 := reg.Push(b, "bench/big2:v1", registrytest.Image(b, v1.Config{}, append(ls[:4:4], other)...))
	total := int64(layers * files * per)

	work := b.TempDir()
	var pullTime, diskTime, pullCPU time.Duration
	var lastStore *Store
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		s := newPullStoreIn(b, filepath.Join(work, fmt.Sprintf("s%d", i))) // fresh: nothing to resume
		b.StartTimer()
		t0, c0 := time.Now(), cpuTime()
		if _, err := s.Pull(b.Context(), ref, "a"); err != nil {
			b.Fatal(err)
		}
		pullTime += time.Since(t0)
		pullCPU += cpuTime() - c0
		b.StopTimer()
		diskTime += writeFsync(b, filepath.Join(s.Dir(), "tmp", "dd"), total)
		lastStore = s
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(total)/(1<<20)/(pullTime.Seconds()/n), "pull-MiB/s")
	b.ReportMetric(float64(total)/(1<<20)/(diskTime.Seconds()/n), "disk-MiB/s")
	b.ReportMetric(float64(gz)/float64(total), "compress-ratio")
	// berth's own CPU per pull (the registry's is not counted): on a
	// shared machine, steadier than the wall clock.
	b.ReportMetric(float64(pullCPU.Milliseconds())/n, "berth-cpu-ms/pull")

	one := onDisk(b, lastStore.Dir())
	if _, err := lastStore.Pull(b.Context(), ref2, "a"); err != nil {
		b.Fatal(err)
	}
	two := onDisk(b, lastStore.Dir())
	b.ReportMetric(float64(one)/(1<<20), "one-image-MiB")
	b.ReportMetric(float64(two)/(1<<20), "two-images-MiB")
}

func newPullStoreIn(b *testing.B, dir string) *Store {
	b.Helper()
	st := openBenchStore(b)
	s, err := New(b.Context(), Options{Dir: dir, Catalog: st, Registry: RegistryOptions{Insecure: []string{"127.0.0.1"}}})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// writeFsync writes n bytes to path and fsyncs it, as dd conv=fsync.
func writeFsync(b *testing.B, path string, n int64) time.Duration {
	buf := make([]byte, 1<<20)
	rand.Read(buf)
	t0 := time.Now()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	for w := int64(0); w < n; w += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	f.Close()
	d := time.Since(t0)
	os.Remove(path)
	return d
}

// onDisk is the bytes of the blocks under dir, each inode counted once (a
// hard link is not a copy), as du counts.
func onDisk(b *testing.B, dir string) int64 {
	seen := map[uint64]bool{}
	var n int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		n += st.Blocks * 512
		return nil
	})
	return n
}

func openBenchStore(b *testing.B) *store.Store {
	st, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// textLike fills b with space-separated words of a small vocabulary, as
// source, config and text files compress.
func textLike(rng *mrand.Rand, b []byte) {
	words := []string{"the", "image", "layer", "func", "return", "error", "config", "berth", "registry",
		"digest", "package", "import", "string", "value", "server", "deployment", "replica", "\n", "{", "}"}
	for i := 0; i < len(b); {
		w := words[rng.IntN(len(words))]
		i += copy(b[i:], w)
		if i < len(b) {
			b[i] = ' '
			i++
		}
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
