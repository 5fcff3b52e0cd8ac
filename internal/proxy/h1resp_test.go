package proxy

import (
	"bufio"
	"bytes"
	"io"
	"maps"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"testing"
)

// responseSeeds are response heads (and bodies) the fast path must read as
// http.ReadResponse does, or leave to it.
var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\nx-lower-case: yes\r\n\r\nhello",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200\r\nContent-Length: 2\r\n\r\nok",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
	"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n5\r\nhello\r\n0\r\nX-Checksum: abc\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
	"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, close\r\nKeep-Alive: timeout=5\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
	"HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n",
	"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\n\r\nuntil close",
	"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
	"HTTP/1.1 200 OK\r\nX-Bare: a\rb\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nBad Key: x\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Ctl: a\x00b\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Empty:\r\nX-Spaces:  v \t\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nX-Obs-Text: caf\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
	"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 099 Odd\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 999 Big\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
}

// TestFastResponseMatchesNetHTTP runs the seeds through FuzzFastResponse.
func TestFastResponseMatchesNetHTTP(t *testing.T) {
	for _, method := range []string{"GET", "HEAD"} {
		for _, s := range responseSeeds {
			checkFastResponse(t, method, []byte(s))
		}
	}
}

// TestFastResponseTakesPlainOnes makes sure the fast path is taken for
// the responses it is for (else the differential check proves nothing).
func TestFastResponseTakesPlainOnes(t *testing.T) {
	for _, s := range responseSeeds[:5] {
		c := &upstreamConn{br: bufio.NewReader(strings.NewReader(s))}
		c.br.Peek(1)
		if _, ok := c.fastResponse(&http.Request{Method: "GET"}, &respScratch{}); !ok {
			t.Errorf("%q: not read by the fast path", s)
		}
	}
}

func FuzzFastResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add(false, []byte(s))
	}
	f.Fuzz(func(t *testing.T, head bool, b []byte) {
		method := "GET"
		if head {
			method = "HEAD"
		}
		checkFastResponse(t, method, b)
	})
}

// checkFastResponse: when the fast path reads b, net/http reads it too, with
// the same status, header (but Connection, which net/http sometimes drops),
// length, Close, body (or failure to read one) and trailer.
func checkFastResponse(t *testing.T, method string, b []byte) {
	t.Helper()
	req := &http.Request{Method: method}
	c := &upstreamConn{br: bufio.NewReader(bytes.NewReader(b))}
	if _, err := c.br.Peek(1); err != nil {
		return
	}
	for _, rs := range []*respScratch{{}, nil} {
		c.br.Reset(bytes.NewReader(b))
		c.br.Peek(1)
		got, ok := c.fastResponse(req, rs)
		if !ok {
			continue
		}
		want, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), req)
		if err != nil {
			t.Fatalf("%s %q: the fast path read it, net/http refused it: %v", method, b, err)
		}
		gotBody, gotErr := io.ReadAll(got.Body)
		wantBody, wantErr := io.ReadAll(want.Body)
		gh, wh := maps.Clone(got.Header), maps.Clone(want.Header)
		delete(gh, "Connection")
		delete(wh, "Connection")
		switch {
		case got.StatusCode != want.StatusCode:
			t.Errorf("%s %q: status %d, net/http %d", method, b, got.StatusCode, want.StatusCode)
		case !reflect.DeepEqual(gh, wh):
			t.Errorf("%s %q: header %v, net/http %v", method, b, gh, wh)
		case got.ContentLength != want.ContentLength:
			t.Errorf("%s %q: length %d, net/http %d", method, b, got.ContentLength, want.ContentLength)
		case got.Close != want.Close:
			t.Errorf("%s %q: close %v, net/http %v", method, b, got.Close, want.Close)
		case (gotErr == nil) != (wantErr == nil):
			t.Errorf("%s %q: body error %v, net/http %v", method, b, gotErr, wantErr)
		case gotErr == nil && !bytes.Equal(gotBody, wantBody):
			t.Errorf("%s %q: body %q, net/http %q", method, b, gotBody, wantBody)
		case gotErr == nil && len(got.Trailer)+len(want.Trailer) > 0 && !reflect.DeepEqual(got.Trailer, want.Trailer):
			t.Errorf("%s %q: trailer %v, net/http %v", method, b, got.Trailer, want.Trailer)
		}
	}
}

// canonicalizeKey and canonicalKey give textproto's canonical form of every
// token, and refuse the rest, whatever the bytes.
func TestCanonicalKeyBytes(t *testing.T) {
	alphabet := []byte("aZz-_0A.~\x7f\x80\xff :")
	var gen func(prefix []byte, n int)
	gen = func(prefix []byte, n int) {
		k := string(prefix)
		want := textproto.CanonicalMIMEHeaderKey(k)
		tok := validToken(k) || k == "" // (callers refuse an empty name first)
		b := []byte(k)
		if ok := canonicalizeKey(b); ok != tok || ok && string(b) != want {
			t.Fatalf("canonicalizeKey(%q) = %q, %v; want %q, %v", k, b, ok, want, tok)
		}
		if got, ok := canonicalKey(k); ok != tok || ok && got != want {
			t.Fatalf("canonicalKey(%q) = %q, %v; want %q, %v", k, got, ok, want, tok)
		}
		if n == 0 {
			return
		}
		for _, c := range alphabet {
			gen(append(prefix, c), n-1)
		}
	}
	gen(nil, 4)
}
