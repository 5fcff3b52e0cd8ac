package build

import (
	"bufio"
	"encoding/base64"
	"errors"
	"io"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"
)

// maxLine is the longest log line passed on; longer ones are cut (a
// build's output is the tenant's, and a line without newlines could
// otherwise be as long as the output).
const maxLine = 4096

// logger passes lines to the caller's logf with every form of the
// credential replaced by "***", and keeps the last tailLines for errors.
type logger struct {
	mu      sync.Mutex
	logf    func(string)
	secrets []string
	last    []string
}

func newLogger(logf func(string), auth *Credential) *logger {
	l := &logger{logf: logf}
	if auth != nil && auth.Token != "" {
		user := auth.Username
		if user == "" {
			user = defaultUsername
		}
		t := auth.Token
		// The token as given, as it appears in a URL or a query, and
		// inside an HTTP basic Authorization header (git's curl traces
		// would print one).
		for _, s := range []string{t, url.QueryEscape(t), url.PathEscape(t),
			base64.StdEncoding.EncodeToString([]byte(user + ":" + t)),
			base64.StdEncoding.EncodeToString([]byte(t))} {
			if s != "" {
				l.secrets = append(l.secrets, s)
			}
		}
	}
	return l
}

func (l *logger) redact(s string) string {
	for _, sec := range l.secrets {
		s = strings.ReplaceAll(s, sec, "***")
	}
	return s
}

func (l *logger) redactErr(err error) error {
	if err == nil {
		return nil
	}
	if r := l.redact(err.Error()); r != err.Error() {
		return errors.New(r)
	}
	return err
}

// line logs one line.
func (l *logger) line(s string) {
	if len(s) > maxLine {
		s = s[:maxLine]
		for !utf8.ValidString(s) && len(s) > 0 {
			s = s[:len(s)-1]
		}
		s += " [line cut]"
	}
	s = l.redact(strings.TrimRight(s, "\r\n"))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = append(l.last, s)
	if len(l.last) > tailLines {
		l.last = l.last[len(l.last)-tailLines:]
	}
	if l.logf != nil {
		l.logf(s)
	}
}

func (l *logger) tail() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.last...)
}

// copyLines logs r's lines until it ends. A progress bar's carriage
// returns end lines too, so a redrawn line is not one ever-growing line.
func (l *logger) copyLines(r io.Reader) {
	br := bufio.NewReaderSize(r, maxLine)
	var cur []byte
	for {
		b, err := br.ReadByte()
		if err != nil {
			if len(cur) > 0 {
				l.line(string(cur))
			}
			return
		}
		switch {
		case b == '\n' || b == '\r':
			if len(cur) > 0 {
				l.line(string(cur))
				cur = cur[:0]
			}
		case len(cur) < maxLine+1:
			cur = append(cur, b)
		}
		// Bytes past maxLine+1 are dropped; line cuts and marks the line.
	}
}

// redactURL drops a URL's userinfo for logs (Build refuses passwords in
// URLs, but a username may be there).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}
