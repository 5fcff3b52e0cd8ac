package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Lease defaults: how often the lease file is read, and how long the app gets
// between SIGTERM and SIGKILL once the lease has expired.
const (
	defaultLeaseCheck = 10 * time.Second
	defaultLeaseGrace = 10 * time.Second
)

// ReadLease parses a lease file: the deadline as decimal unix seconds,
// optionally followed by a newline (what `date +%s` prints).
func ReadLease(path string) (time.Time, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	s := strings.TrimSpace(string(b))
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("lease file %s: want a unix time in seconds, got %q", path, truncate(s, 40))
	}
	return time.Unix(sec, 0), nil
}

// FormatLease is the lease file content for deadline until: unix seconds,
// rounded up so that a lease is never shorter than asked.
func FormatLease(until time.Time) []byte {
	sec := until.Unix()
	if until.After(time.Unix(sec, 0)) {
		sec++
	}
	return []byte(strconv.FormatInt(sec, 10) + "\n")
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// watchLease reads the lease file at once and then every interval until ctx
// ends or the deadline has passed, when it closes expired. A missing or
// unreadable file is not an expiry — the replica keeps running, because
// killing a healthy app over a lost file would be worse than the leak the
// lease guards against — and it is logged once per distinct problem.
func (m *mainRun) watchLease(ctx context.Context, path string, interval time.Duration, expired chan<- struct{}) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var problem string
	for {
		until, err := ReadLease(path)
		switch {
		case err != nil:
			if msg := err.Error(); msg != problem {
				problem = msg
				if errors.Is(err, fs.ErrNotExist) {
					m.logf("lease file: none at %s; running without a lease", path)
				} else {
					m.logf("lease file: unreadable, running on: %v", err)
				}
			}
		case !time.Now().Before(until):
			m.logf("lease expired at %s: stopping", until.UTC().Format(time.RFC3339))
			close(expired)
			return
		default:
			problem = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// handleLease is PUT /v1/lease: the body, a deadline as FormatLease
// writes it (unix seconds), replaces the lease file's (Options.LeaseFile)
// atomically, making its directory if need be.
func (s *Server) handleLease(w http.ResponseWriter, r *http.Request) {
	if s.opts.LeaseFile == "" {
		writeError(w, http.StatusNotFound, "this agent has no lease file (--lease-file)")
		return
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64))
	if err != nil {
		writeError(w, http.StatusBadRequest, "reading the lease: "+err.Error())
		return
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || sec <= 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("the lease %q is not a deadline in unix seconds", truncate(string(b), 64)))
		return
	}
	if err := replaceLease(s.opts.LeaseFile, FormatLease(time.Unix(sec, 0))); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// replaceLease writes b to path through a temporary file and a rename, so
// that the watcher never reads half a deadline.
func replaceLease(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// SetLease moves the agent's lease deadline to until (PUT /v1/lease).
func (c *Client) SetLease(ctx context.Context, until time.Time) error {
	return c.do(ctx, "PUT", "/v1/lease", nil, bytes.NewReader(FormatLease(until)), nil)
}
