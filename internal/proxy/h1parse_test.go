package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// parseSeeds are requests the parser must accept, hand off or refuse; they
// seed FuzzParseRequest and TestParseRequest.
var parseSeeds = []struct {
	raw  string
	want string // "ok", "handoff", or the status of the refusal
}{
	{"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n", "ok"},
	{"GET /x/y?z=1&w HTTP/1.1\r\nHost: a.test:8080\r\nUser-Agent: t\r\nAccept: */*\r\n\r\n", "ok"},
	{"GET /caf%C3%A9/(x)?q HTTP/1.1\r\nHost: a\r\n\r\n", "ok"},
	{"GET /a? HTTP/1.1\r\nHost: a\r\n\r\n", "ok"},
	{"GET //double/slash HTTP/1.1\r\nHost: a\r\n\r\n", "ok"},
	{"GET /x HTTP/1.0\r\n\r\n", "ok"},
	{"GET /x HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "ok"},
	{"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", "ok"},
	{"GET /x HTTP/1.1\r\nhost: a\r\ncontent-TYPE: text/plain\r\nx-a: 1\r\nX-A: 2\r\n\r\n", "ok"},
	{"GET /x HTTP/1.1\r\nHost: a\r\nPragma: no-cache\r\n\r\n", "ok"},
	{"GET /x HTTP/1.1\r\nHost: a\r\nX-Empty:\r\nX-Tab:\tv\t\r\nX-Obs: caf\xc3\xa9\r\n\r\n", "ok"},
	{"GET /x HTTP/1.1\r\nHost: \r\n\r\n", "ok"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello", "ok"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello", "ok"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n", "ok"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "ok"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-T: 1\r\n\r\n", "ok"},
	{"GET /p HTTP/1.1\r\nHost: a\r\n\r\nGET /q HTTP/1.1\r\nHost: a\r\n\r\n", "ok"},

	{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "handoff"},
	{"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", "handoff"},
	{"GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", "ok"},
	{"GET HTTPS://b.test:8443?q=1 HTTP/1.1\r\nHost: a.test\r\n\r\n", "ok"},
	{"POST http://a.test/x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello", "ok"},
	{"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n", "handoff"},
	{"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", "handoff"},
	{"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n", "ok"},
	{"GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: h2c, websocket\r\n\r\n", "handoff"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\nhello", "handoff"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n0\r\nX-T: 1\r\n\r\n", "handoff"},
	{"GET / HTTP/1.2\r\nHost: a\r\n\r\n", "ok"},
	{"POST / HTTP/1.9\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", "ok"},

	// Request smuggling and other ambiguities: refused, whatever the
	// request line says.
	{"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", "400"},
	{"POST http://t.example/a HTTP/1.1\r\nHost: t.example\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
	{"POST / HTTP/1.2\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
	{"GET http://t.example/a HTTP/1.1\r\nHost: t.example\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n", "400"},
	{"OPTIONS * HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "400"},
	{"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\nX-A: 1\r\n\tb\r\n\r\n", "400"},
	{"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", "400"},
	{"GET ftp://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", "400"},
	{"GET http://u@a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n", "400"},
	{"GET http:///x HTTP/1.1\r\nHost: a.test\r\n\r\n", "400"},
	{"GET http://a.test/x HTTP/1.1\r\n\r\n", "400"},
	{"GET / HTTP/2.0\r\nHost: a\r\n\r\n", "505"},
	{"GET / HTTP/0.9\r\nHost: a\r\n\r\n", "505"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nhello", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nhello", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", "400"},
	{"POST /p HTTP/1.1\r\nHost: a\r\nX-Foo: bar\r\n\tContent-Length: 5\r\n\r\nhello", "400"},
	{"POST /p HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
	{"GET / HTTP/1.1\nHost: a\n\n", "400"},
	{"GET / HTTP/1.1\r\nHost: a\n\r\n", "400"},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", "400"},
	{"GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n", "400"},
	{"GET / HTTP/1.1\r\nHost: a\r\nX\x7f: b\r\n\r\n", "400"},
	{"GET / HTTP/1.1\r\nHost: a\r\n: b\r\n\r\n", "400"},
	{"GET / HTTP/1.1\r\nHost: a\r\nno colon\r\n\r\n", "400"},
	{"GET / HTTP/1.1\r\n\r\n", "400"},
	{"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", "400"},
	{"GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", "400"},
	{"GET  / HTTP/1.1\r\nHost: a\r\n\r\n", "400"},
	{"GET / x HTTP/1.1\r\nHost: a\r\n\r\n", "400"},
	{"G(T / HTTP/1.1\r\nHost: a\r\n\r\n", "400"},
	{"GET / HTTP/1.1 \r\nHost: a\r\n\r\n", "400"},
	{"GET /\x01 HTTP/1.1\r\nHost: a\r\n\r\n", "400"},
	{"GET / FOO/1.1\r\nHost: a\r\n\r\n", "400"},
}

// TestParseRequest checks each seed's verdict.
func TestParseRequest(t *testing.T) {
	for _, tt := range parseSeeds {
		p := parser{}
		err := p.readHead(bufio.NewReader(strings.NewReader(tt.raw)))
		var got string
		var he *headError
		switch {
		case err == nil:
			got = "ok"
		case err == errHandOff:
			got = "handoff"
		case errors.As(err, &he):
			got = strconv.Itoa(he.status)
		default:
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("%q: %s (%v), want %s", tt.raw, got, err, tt.want)
		}
	}
}

// TestParseLimits checks the head size and field count limits, and a head
// longer than the read buffer.
func TestParseLimits(t *testing.T) {
	long := "GET /" + strings.Repeat("a", 20000) + " HTTP/1.1\r\nHost: a\r\nX-Long: " + strings.Repeat("b", 20000) + "\r\n\r\n"
	p := parser{maxBytes: 64 << 10}
	if err := p.readHead(bufio.NewReaderSize(strings.NewReader(long), 16)); err != nil {
		t.Fatalf("long head: %v", err)
	}
	if got := p.head.header.Get("X-Long"); len(got) != 20000 || len(p.head.url.Path) != 20001 {
		t.Errorf("long head parsed as path %d bytes, X-Long %d bytes", len(p.head.url.Path), len(got))
	}
	p = parser{maxBytes: 16 << 10}
	if err := p.readHead(bufio.NewReader(strings.NewReader(long))); err != errHeadTooLarge {
		t.Errorf("head over the limit: %v, want %v", err, errHeadTooLarge)
	}
	many := "GET / HTTP/1.1\r\nHost: a\r\n" + strings.Repeat("X-A: 1\r\n", maxHeaderFields+1) + "\r\n"
	p = parser{}
	if err := p.readHead(bufio.NewReader(strings.NewReader(many))); err != errHeadTooLarge {
		t.Errorf("%d fields: %v, want %v", maxHeaderFields+2, err, errHeadTooLarge)
	}
}

// FuzzParseRequest checks that the parser never panics, and that whatever it
// accepts net/http reads the same way: the original bytes, and the request
// re-serialized from what the parser understood, both give http.ReadRequest
// the same method, target, URL, Host, header, framing and body. A difference
// would be a request berth and a backend (or berth's own fallback) could
// disagree on: a smuggling vector.
func FuzzParseRequest(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s.raw))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := parser{maxBytes: 64 << 10}
		br := bufio.NewReaderSize(bytes.NewReader(data), 64)
		if err := p.readHead(br); err != nil {
			return
		}
		h := &p.head
		body := []byte{}
		if h.contentLength != 0 {
			b := &h1Body{br: br, remaining: h.contentLength}
			if h.contentLength < 0 {
				b.cr = &chunkedReader{br: br}
			}
			var err error
			if body, err = io.ReadAll(b); err != nil {
				// A body that breaks off is the handler's error to
				// see, not the head's: net/http must still agree on
				// the head.
				body = nil
			}
		}
		check := func(what string, raw []byte, wantBody []byte) {
			t.Helper()
			req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
			if err != nil {
				t.Fatalf("%s: net/http refuses what the parser accepted: %v\n%q", what, err, raw)
			}
			if req.Method != h.method || req.RequestURI != h.target || req.Proto != h.proto {
				t.Fatalf("%s: request line %q %q %q, parser %q %q %q", what, req.Method, req.RequestURI, req.Proto, h.method, h.target, h.proto)
			}
			if !reflect.DeepEqual(*req.URL, h.url) {
				t.Fatalf("%s: URL %#v, parser %#v", what, *req.URL, h.url)
			}
			if req.Host != h.host {
				t.Fatalf("%s: Host %q, parser %q", what, req.Host, h.host)
			}
			delete(req.Header, "Host")
			if uv := req.Header["Upgrade"]; len(uv) > 0 && listedIn(uv, "h2c") {
				stripH2C(req.Header) // the parser drops h2c upgrades
			}
			if !reflect.DeepEqual(req.Header, h.header) && !(len(req.Header) == 0 && len(h.header) == 0) {
				t.Fatalf("%s: header %q, parser %q", what, req.Header, h.header)
			}
			if req.ContentLength != h.contentLength || (len(req.TransferEncoding) > 0) != (h.contentLength < 0) || req.Close != h.close {
				t.Fatalf("%s: framing %d %q close=%v, parser %d close=%v", what, req.ContentLength, req.TransferEncoding, req.Close, h.contentLength, h.close)
			}
			if wantBody == nil {
				return // the body broke off: already refused by the parser's reader
			}
			got, err := io.ReadAll(req.Body)
			if err != nil || !bytes.Equal(got, wantBody) {
				t.Fatalf("%s: body %q (%v), parser %q", what, got, err, wantBody)
			}
		}
		check("original", data, body)
		if body == nil {
			return
		}
		check("re-serialized", serializeHead(h, body), body)
	})
}

// serializeHead writes a parsed request back out, with its body framed as it
// came (chunked as one chunk).
func serializeHead(h *reqHead, body []byte) []byte {
	var b bytes.Buffer
	b.WriteString(h.method + " " + h.target + " " + h.proto + "\r\n")
	if h.host != "" || h.minor == 1 {
		b.WriteString("Host: " + h.host + "\r\n")
	}
	for k, vv := range h.header {
		for _, v := range vv {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	if h.contentLength < 0 {
		b.WriteString("Transfer-Encoding: chunked\r\n\r\n")
		if len(body) > 0 {
			b.WriteString(strconv.FormatInt(int64(len(body)), 16) + "\r\n")
			b.Write(body)
			b.WriteString("\r\n")
		}
		b.WriteString("0\r\n\r\n")
		return b.Bytes()
	}
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// validFieldValue reads eight bytes at a time: every byte value at every
// position of values of every length up to 30 gets the byte loop's answer.
func TestValidFieldValueWords(t *testing.T) {
	slow := func(s string) bool {
		for i := 0; i < len(s); i++ {
			if c := s[i]; (c < 0x20 && c != '\t') || c == 0x7f {
				return false
			}
		}
		return true
	}
	base := []byte("abcdefghijklmnopqrstuvwxyz0123")
	for n := 0; n <= len(base); n++ {
		for i := 0; i < n; i++ {
			for c := 0; c < 256; c++ {
				b := append([]byte(nil), base[:n]...)
				b[i] = byte(c)
				if got, want := validFieldValue(string(b)), slow(string(b)); got != want {
					t.Fatalf("%q: %v, want %v", b, got, want)
				}
				// neighbours with high bytes
				if i+1 < n {
					b[i+1] = 0xff
					if got, want := validFieldValue(string(b)), slow(string(b)); got != want {
						t.Fatalf("%q: %v, want %v", b, got, want)
					}
				}
			}
		}
	}
}
