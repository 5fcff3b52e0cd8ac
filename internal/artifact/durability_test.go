package artifact

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const (
	childEnv    = "BERTH_ARTIFACT_CHILD"
	childDirEnv = "BERTH_ARTIFACT_CHILD_DIR"
)

// TestKill9Durability starts a child process that uploads blobs and moves
// a tag as fast as it can, printing each only after its PUT returned, while
// one large upload trickles in the background. The parent SIGKILLs it, then
// reopens the store: every acknowledged blob and the last acknowledged tag
// must be there, every visible blob must hash to its name (no partial file
// under a digest), and the trickled upload must not be visible at all.
func TestKill9Durability(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		runDurabilityChild()
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	const wantAcks = 60
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestKill9Durability$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", childDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	var acked []string
	lastTag, partial := "", ""
	sc := bufio.NewScanner(stdout)
	for len(acked) < wantAcks && sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "ack":
			acked = append(acked, f[1])
		case len(f) == 2 && f[0] == "tag":
			lastTag = f[1]
		case len(f) == 2 && f[0] == "partial":
			partial = f[1]
		}
	}
	if len(acked) < wantAcks || partial == "" {
		t.Fatalf("child stopped after %d acknowledged uploads, partial %q (scan error: %v)", len(acked), partial, sc.Err())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill child: %v", err)
	}
	killed = true
	cmd.Wait()

	// The kill left the trickled upload in tmp/ (it had bytes on disk).
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) == 0 {
		t.Logf("no temporary file left by the kill (the child may have been between uploads)")
	}
	s, err := NewStore(dir, StoreOptions{})
	if err != nil {
		t.Fatalf("reopen after kill -9: %v", err)
	}
	for _, d := range acked {
		if _, err := s.Stat(d); err != nil {
			t.Errorf("acknowledged blob %s lost: %v", d, err)
		}
		if !s.Claimed("ns", d) {
			t.Errorf("acknowledged blob %s lost its claim", d)
		}
	}
	if _, err := s.Stat(partial); err == nil {
		t.Errorf("the upload cut short by the kill is visible under its digest")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(ents) != 0 {
		t.Errorf("tmp/ not emptied at open: %d entries", len(ents))
	}
	// Every visible blob is whole.
	ents, err := os.ReadDir(filepath.Join(dir, "blobs", "sha256"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, "blobs", "sha256", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		h := sha256.New()
		io.Copy(h, f)
		f.Close()
		if got := fmt.Sprintf("%x", h.Sum(nil)); got != e.Name() {
			t.Errorf("blob %s holds bytes hashing to %s", e.Name(), got)
		}
	}
	// The tag is at least at the last acknowledged digest: the child moves
	// it in order, so anything else acknowledged later or not at all.
	rec, err := s.Tag("ns/latest")
	if err != nil {
		t.Fatalf("tag ns/latest lost: %v", err)
	}
	pos := map[string]int{}
	for i, d := range acked {
		pos[d] = i
	}
	if p, ok := pos[rec.Digest]; lastTag != "" && ok && p < pos[lastTag] {
		t.Errorf("tag ns/latest went back to %s; last acknowledged %s", rec.Digest, lastTag)
	}
	if _, err := s.Stat(rec.Digest); err != nil {
		t.Errorf("tag ns/latest = %s, not a stored blob", rec.Digest)
	}
	t.Logf("%d acknowledged uploads survived kill -9; tag at %s", len(acked), rec.Digest[:12])
}

// slowReader trickles n pseudo-random bytes, 4 KiB every millisecond.
type slowReader struct {
	r *rand.ChaCha8
	n int
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	time.Sleep(time.Millisecond)
	p = p[:min(len(p), 4096, s.n)]
	s.r.Read(p)
	s.n -= len(p)
	return len(p), nil
}

func runDurabilityChild() {
	dir := os.Getenv(childDirEnv)
	s, err := NewStore(dir, StoreOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The trickle: its digest is known up front (same seed), and it is
	// never complete before the parent kills the child.
	const big = 64 << 20
	var seed [32]byte
	seed[0] = 7
	h := sha256.New()
	io.Copy(h, &slowReaderFast{rand.NewChaCha8(seed), big})
	partial := fmt.Sprintf("%x", h.Sum(nil))
	go s.PutBlob(partial, &slowReader{rand.NewChaCha8(seed), big}, "ns")
	fmt.Printf("partial %s\n", partial)
	for i := 0; ; i++ {
		b := make([]byte, 1+rand.IntN(256<<10))
		for j := range b {
			b[j] = byte(rand.Uint32())
		}
		d := fmt.Sprintf("%x", sha256.Sum256(b))
		if _, _, err := s.PutBlob(d, strings.NewReader(string(b)), "ns"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("ack %s\n", d)
		if _, err := s.PutTag("ns/latest", TagRecord{Digest: d}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Printf("tag %s\n", d)
	}
}

// slowReaderFast yields slowReader's bytes without the sleeps.
type slowReaderFast struct {
	r *rand.ChaCha8
	n int
}

func (s *slowReaderFast) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(len(p), 4096, s.n)]
	s.r.Read(p)
	s.n -= len(p)
	return len(p), nil
}
