package untar

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type entry struct {
	name, link string
	typ        byte
	mode       int64
	body       string
}

func archive(t *testing.T, es ...entry) *bytes.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.body))}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b.Bytes())
}

// TestUnpackStaysInside: whatever the options, no entry lands outside the
// directory: ".." and absolute names resolve inside it, and a hard link
// out of it or a path through a symlink that leaves it is refused.
func TestUnpackStaysInside(t *testing.T) {
	for _, o := range []Options{{}, {Tree: true}, {Tree: true, Layer: true}} {
		outside := t.TempDir()
		// Names resolved inside, as tar does.
		dir := t.TempDir()
		if _, err := Unpack(context.Background(), archive(t,
			entry{name: "../../up", typ: tar.TypeReg, body: "a"},
			entry{name: "/abs", typ: tar.TypeReg, body: "b"},
		), dir, o); err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		for _, n := range []string{"up", "abs"} {
			if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
				t.Errorf("%+v: %s not unpacked inside: %v", o, n, err)
			}
		}
		refused := map[string][]entry{
			"write through a symlink": {
				{name: "l", link: outside, typ: tar.TypeSymlink},
				{name: "l/x", typ: tar.TypeReg, body: "x"},
			},
			"hard link out": {
				{name: "h", link: "../../" + filepath.Join(outside, "f"), typ: tar.TypeLink},
			},
			"hard link through a symlink": {
				{name: "l", link: outside, typ: tar.TypeSymlink},
				{name: "h", link: "l/f", typ: tar.TypeLink},
			},
		}
		if err := os.WriteFile(filepath.Join(outside, "f"), []byte("host"), 0o644); err != nil {
			t.Fatal(err)
		}
		for what, es := range refused {
			if _, err := Unpack(context.Background(), archive(t, es...), t.TempDir(), o); err == nil {
				t.Errorf("%+v: %s: unpacked", o, what)
			}
		}
		if _, err := Unpack(context.Background(), archive(t, entry{name: "a/../../up", typ: tar.TypeReg}), t.TempDir(), Options{RefuseOutside: true, Tree: o.Tree, Layer: o.Layer}); err == nil || !strings.Contains(err.Error(), "leaves the tree") {
			t.Errorf("%+v with RefuseOutside: a name climbing out: %v", o, err)
		}
		ents, _ := os.ReadDir(outside)
		if len(ents) != 1 {
			t.Errorf("%+v: the outside directory holds %d entries, want only its own f", o, len(ents))
		}
	}
}

// TestUnpackPlainDropsWhatATreeKeeps: without Tree, setuid bits are
// dropped and a fifo is refused; with it both are kept.
func TestUnpackPlainDropsWhatATreeKeeps(t *testing.T) {
	suid := archive(t, entry{name: "bin/su", typ: tar.TypeReg, mode: 0o4755, body: "#!"})
	plain := t.TempDir()
	if _, err := Unpack(context.Background(), suid, plain, Options{}); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(plain, "bin/su"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&fs.ModeSetuid != 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("plain: mode %v, want 0755 without setuid", fi.Mode())
	}
	suid.Seek(0, 0)
	tree := t.TempDir()
	if _, err := Unpack(context.Background(), suid, tree, Options{Tree: true}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(tree, "bin/su")); err != nil || fi.Mode()&fs.ModeSetuid == 0 {
		t.Errorf("tree: setuid dropped (%v, %v)", fi, err)
	}

	fifo := entry{name: "p", typ: tar.TypeFifo}
	if _, err := Unpack(context.Background(), archive(t, fifo), t.TempDir(), Options{}); err == nil || !strings.Contains(err.Error(), "fifo") {
		t.Errorf("plain: a fifo unpacked (%v)", err)
	}
	d := t.TempDir()
	if _, err := Unpack(context.Background(), archive(t, fifo), d, Options{Tree: true}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(d, "p")); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("tree: no fifo (%v, %v)", fi, err)
	}
}

// TestUnpackLayerWhiteouts: with Layer a whiteout is an empty marker and
// one that names nothing or is not a file is refused; without it a ".wh."
// name is an ordinary file with its content.
func TestUnpackLayerWhiteouts(t *testing.T) {
	wh := entry{name: "etc/.wh.gone", typ: tar.TypeReg, body: "content"}
	d := t.TempDir()
	if _, err := Unpack(context.Background(), archive(t, wh), d, Options{Tree: true, Layer: true}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(d, "etc/.wh.gone")); err != nil || len(b) != 0 {
		t.Errorf("layer: marker %q, %v; want an empty file", b, err)
	}
	d = t.TempDir()
	if _, err := Unpack(context.Background(), archive(t, wh), d, Options{Tree: true}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(d, "etc/.wh.gone")); err != nil || string(b) != "content" {
		t.Errorf("tree: .wh. file %q, %v; want its content", b, err)
	}
	for _, bad := range []entry{
		{name: "etc/.wh.", typ: tar.TypeReg},
		{name: ".wh..", typ: tar.TypeReg},
		{name: "etc/.wh.x", link: "/etc/passwd", typ: tar.TypeSymlink},
		{name: "etc/.wh.d", typ: tar.TypeDir, mode: 0o755},
	} {
		if _, err := Unpack(context.Background(), archive(t, bad), t.TempDir(), Options{Tree: true, Layer: true}); err == nil {
			t.Errorf("layer: whiteout %q (type %c) unpacked", bad.name, bad.typ)
		}
		if _, err := Unpack(context.Background(), archive(t, bad), t.TempDir(), Options{Tree: true}); err != nil && bad.name != ".wh.." {
			t.Errorf("tree: %q refused: %v", bad.name, err)
		}
	}
	opq := entry{name: "var/" + OpaqueMarker, typ: tar.TypeReg}
	if _, err := Unpack(context.Background(), archive(t, opq), t.TempDir(), Options{Tree: true, Layer: true}); err != nil {
		t.Errorf("layer: the opaque marker refused: %v", err)
	}
}

// TestUnpackStripAndCancel: StripComponents drops leading components (and
// skips what has no more), and a cancelled context stops the unpack.
func TestUnpackStripAndCancel(t *testing.T) {
	d := t.TempDir()
	st, err := Unpack(context.Background(), archive(t,
		entry{name: "pkg", typ: tar.TypeDir, mode: 0o755},
		entry{name: "pkg/a", typ: tar.TypeReg, body: "abc"},
		entry{name: "pkg/b", link: "pkg/a", typ: tar.TypeLink},
	), d, Options{StripComponents: 1})
	if err != nil {
		t.Fatal(err)
	}
	if st.Bytes != 3 || st.Files != 2 {
		t.Errorf("stats %+v, want 2 files of 3 bytes", st)
	}
	if b, err := os.ReadFile(filepath.Join(d, "b")); err != nil || string(b) != "abc" {
		t.Errorf("stripped hard link: %q, %v", b, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Unpack(ctx, archive(t, entry{name: "a", typ: tar.TypeReg}), t.TempDir(), Options{}); err == nil {
		t.Error("unpacked after its context ended")
	}
}
