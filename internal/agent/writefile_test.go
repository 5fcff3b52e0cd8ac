package agent_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/agent"
)

// bigContent is content larger than the agent's copy buffers and its
// writeback stretch, so a write of it takes every path of the copy.
func bigContent() []byte {
	b := make([]byte, 20<<20+12345)
	for i := range b {
		b[i] = byte(i*31 + i>>13)
	}
	return b
}

// onlyReader hides every method of r but Read, as a request body would.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// TestWriteFileLarge writes a file larger than the copy buffers, with a
// known length (WriteFileN) and chunked (WriteFile of a reader of unknown
// length), and checks the bytes and the hash the agent reports.
func TestWriteFileLarge(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	ctx := t.Context()
	dir := t.TempDir()
	data := bigContent()
	sum := sha256.Sum256(data)
	for _, tc := range []struct {
		name  string
		write func(p string) (agent.FileInfo, error)
	}{
		{"WriteFileN", func(p string) (agent.FileInfo, error) {
			return c.WriteFileN(ctx, p, onlyReader{bytes.NewReader(data)}, int64(len(data)), 0o640)
		}},
		{"WriteFile chunked", func(p string) (agent.FileInfo, error) {
			return c.WriteFile(ctx, p, onlyReader{bytes.NewReader(data)}, 0o640)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			fi, err := tc.write(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Size != int64(len(data)) || fi.SHA256 != hex.EncodeToString(sum[:]) || fi.Perm() != 0o640 {
				t.Errorf("info %+v, want %d bytes, sha256 %x, mode 0640", fi, len(data), sum)
			}
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("file holds %d bytes (%v), not what was written", len(got), err)
			}
		})
	}
}

// TestWriteFileNShort: a body that ends before its announced length fails
// the write and leaves the file as it was, without a stray temp file.
func TestWriteFileNShort(t *testing.T) {
	c, _ := serve(t, agent.Options{})
	ctx := t.Context()
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteFileN(ctx, p, strings.NewReader("short"), 1000, 0); err == nil {
		t.Fatal("WriteFileN of 5 bytes announced as 1000 succeeded")
	}
	if got, _ := os.ReadFile(p); string(got) != "old" {
		t.Errorf("file holds %q after a failed write, want the old content", got)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("directory holds %d entries after a failed write, want the file alone", len(ents))
	}
	if _, err := c.WriteFileN(ctx, p, strings.NewReader(""), -1, 0); err == nil || !strings.Contains(err.Error(), "negative length") {
		t.Errorf("WriteFileN with length -1: %v, want a negative-length error", err)
	}
	// An empty file with a zero length is fine.
	if fi, err := c.WriteFileN(ctx, p, strings.NewReader(""), 0, 0); err != nil || fi.Size != 0 {
		t.Errorf("WriteFileN of nothing: %+v, %v", fi, err)
	}
	var ae *agent.Error
	if _, err := c.WriteFileN(ctx, dir, strings.NewReader("x"), 1, 0); !errors.As(err, &ae) {
		t.Errorf("WriteFileN over a directory: %v, want an agent error", err)
	}
}
