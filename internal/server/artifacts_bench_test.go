package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"
)

// BenchmarkArtifact100MiB pushes and fetches a 100 MiB blob through
// /namespaces/{ns}/artifacts on loopback, as the operator: the push side
// includes the server's SHA-256 check and the fsyncs before the answer.
//
//	go test -run '^$' -bench BenchmarkArtifact100MiB -benchtime 5x ./internal/server/
func BenchmarkArtifact100MiB(b *testing.B) {
	s, err := New(context.Background(), Options{
		DataDir: b.TempDir(), ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0",
		Log: slog.New(slog.DiscardHandler), DrainTimeout: 5 * time.Second,
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	base := "http://" + s.AdminAddr() + "/namespaces/bench/artifacts/blobs/"
	const size = 100 << 20
	blob := make([]byte, size)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	hc := &http.Client{}
	do := func(method, url string, body []byte) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, _ := http.NewRequest(method, url, rd)
		resp, err := hc.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 || method == "GET" && n != size {
			b.Fatalf("%s: %s (%d bytes)", method, resp.Status, n)
		}
	}
	var last string
	b.Run("push", func(b *testing.B) {
		b.SetBytes(size)
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			binary.LittleEndian.PutUint64(blob, uint64(time.Now().UnixNano())+uint64(i)) // a new blob each time
			last = fmt.Sprintf("%x", sha256.Sum256(blob))
			b.StartTimer()
			do("PUT", base+last, blob)
		}
	})
	b.Run("get", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			do("GET", base+last, nil)
		}
	})
}
