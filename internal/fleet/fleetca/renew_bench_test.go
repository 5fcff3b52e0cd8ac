package fleetca

import (
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkLoadCAKey: reading and opening the sealed CA key, as every
// join and renewal does.
func BenchmarkLoadCAKey(b *testing.B) {
	d := b.TempDir()
	if _, err := Init(InitOptions{DataDir: d, Advertise: "127.0.0.1:23790", HostID: "alpha"}); err != nil {
		b.Fatal(err)
	}
	key, err := LoadSecretKey("", d)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := LoadCAKey(d, key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSignRenewal: the first host's check of a renewal's proof and
// the signing of the new certificate (no HTTP).
func BenchmarkSignRenewal(b *testing.B) {
	d := b.TempDir()
	if _, err := Init(InitOptions{DataDir: d, Advertise: "127.0.0.1:23790", HostID: "alpha"}); err != nil {
		b.Fatal(err)
	}
	key, err := LoadSecretKey("", d)
	if err != nil {
		b.Fatal(err)
	}
	crt, err := readCert(filepath.Join(Dir(d), HostCert))
	if err != nil {
		b.Fatal(err)
	}
	hk, err := readKey(filepath.Join(Dir(d), HostKey))
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now()
	req := renewRequest(b, crt, hk, "alpha", now.Unix())
	for b.Loop() {
		if _, err := SignRenewal(d, key, req, now); err != nil {
			b.Fatal(err)
		}
	}
}
