package siem

import (
	"strings"

	"github.com/berth-dev/berth/apitype"
)

// webKind is a web attack signature class; the order is the precedence
// within a severity (the highest severity wins, then the lowest kind).
type webKind int

const (
	webNone webKind = iota
	webRCE
	webTraversal
	webSQLi
	webXSS
	webSecretProbe
)

var webRules = [...]struct {
	rule, technique, what string
	sev                   apitype.Severity
}{
	webRCE:         {RuleRCE, "T1190", "Remote code execution", apitype.SeverityCritical},
	webTraversal:   {RuleTraversal, "T1083", "Path traversal", apitype.SeverityHigh},
	webSQLi:        {RuleSQLi, "T1190", "SQL injection", apitype.SeverityHigh},
	webXSS:         {RuleXSS, "T1190", "Cross-site scripting", apitype.SeverityMedium},
	webSecretProbe: {RuleSecretProbe, "T1595.002", "Secret file probe", apitype.SeverityMedium},
}

// maxScan bounds how much of a path (and of each query value) is scanned.
const maxScan = 2048

// secretPrefixes are paths a scanner asks every server for.
var secretPrefixes = []string{"/.env", "/.git/", "/.aws/", "/.ssh/", "/wp-login.php", "/wp-admin",
	"/phpmyadmin", "/xmlrpc.php", "/server-status", "/config.json"}

// lowerASCII returns s with ASCII letters lowered, using buf as scratch.
// Only ASCII is folded: every signature is ASCII, and no non-ASCII byte
// lowers into one.
func lowerASCII(buf *[]byte, s string) string {
	b := append((*buf)[:0], s...)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	*buf = b
	return string(b)
}

// mayInject reports whether s holds something every injection signature
// needs (scanValue finds nothing in a string without): one of the bytes
// $ % ; \ ' " < ( : = * +, whitespace, "..", or "/bin/" in any case. Most
// paths and values hold none, and are then spared the lowering and the
// scan — the SIEM's analysis runs for every request the proxy serves.
func mayInject(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '$', '%', ';', '\\', '\'', '"', '<', '(', ':', '=', ' ', '\t', '\n', '\r', '+', '*':
			return true
		case '.':
			if i+1 < len(s) && s[i+1] == '.' {
				return true
			}
		case '/':
			if i+5 <= len(s) && s[i+1]|0x20 == 'b' && s[i+2]|0x20 == 'i' && s[i+3]|0x20 == 'n' && s[i+4] == '/' {
				return true
			}
		}
	}
	return false
}

// secretProbe reports a path under one of secretPrefixes (ASCII case
// ignored) and the prefix as it appears in path.
func secretProbe(path string) (webKind, string) {
	for _, p := range secretPrefixes {
		if len(path) >= len(p) && strings.EqualFold(path[:len(p)], p) {
			return webSecretProbe, path[:len(p)]
		}
	}
	return webNone, ""
}

// scanPath returns the strongest signature in a request path, and the
// matched text as it appears in path (for a literal block rule; empty
// where there is none to offer). l is the lowered path, no longer than
// maxScan.
func scanPath(l string, path string) (webKind, string) {
	k, at, n := scanValue(l)
	if k != webNone {
		return k, path[at : at+n]
	}
	return secretProbe(path)
}

// scanValue returns the strongest injection signature in l (already
// lowered) and where it matched. Secret probes are a path-only class.
func scanValue(l string) (k webKind, at, n int) {
	if at, n = findRCE(l); n > 0 {
		return webRCE, at, n
	}
	if at, n = findTraversal(l); n > 0 {
		return webTraversal, at, n
	}
	if at, n = findSQLi(l); n > 0 {
		return webSQLi, at, n
	}
	if at, n = findXSS(l); n > 0 {
		return webXSS, at, n
	}
	return webNone, 0, 0
}

func hasPrefix(l, p string) bool { return strings.HasPrefix(l, p) }

func index(l, p string) int { return strings.Index(l, p) }

// findAny returns the first of pats found in l.
func findAny(l string, pats ...string) (int, int) {
	best, bn := -1, 0
	for _, p := range pats {
		if i := index(l, p); i >= 0 && (best < 0 || i < best) {
			best, bn = i, len(p)
		}
	}
	return best, bn
}

// ws skips one separator an injection uses between words: a space, tab,
// newline, '+', their percent encodings, or an empty SQL comment.
func ws(l string, i int) int {
	switch {
	case i >= len(l):
		return 0
	case l[i] == ' ' || l[i] == '\t' || l[i] == '\n' || l[i] == '\r' || l[i] == '+':
		return 1
	case hasPrefix(l[i:], "%20") || hasPrefix(l[i:], "%09") || hasPrefix(l[i:], "%0a") || hasPrefix(l[i:], "%0d"):
		return 3
	case hasPrefix(l[i:], "/**/"):
		return 4
	}
	return 0
}

// skipWS skips any run of separators; it reports how many it skipped.
func skipWS(l string, i int) (int, int) {
	n := 0
	for {
		w := ws(l, i)
		if w == 0 {
			return i, n
		}
		i += w
		n++
	}
}

func isAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' }

// word reports whether l[i:] starts with w followed by a non-word byte or
// the end.
func word(l string, i int, w string) bool {
	return hasPrefix(l[i:], w) && (i+len(w) == len(l) || !isAlnum(l[i+len(w)]))
}

// semis calls f with the index after each ';' (or "%3b") in l until f
// returns where a match ends; it returns where that match starts and its
// length.
func semis(l string, f func(j int) int) (int, int) {
	for i := 0; i < len(l); i++ {
		var j int
		switch {
		case l[i] == ';':
			j = i + 1
		case hasPrefix(l[i:], "%3b"):
			j = i + 3
		default:
			continue
		}
		if end := f(j); end > 0 {
			return i, end - i
		}
	}
	return -1, 0
}

func findRCE(l string) (int, int) {
	if at, n := findAny(l, "${jndi:", "%24%7bjndi:", "/bin/sh", "/bin/bash", "exec("); n > 0 {
		return at, n
	}
	at, n := semis(l, func(j int) int {
		k, _ := skipWS(l, j)
		for _, c := range [...]string{"cat", "curl", "wget"} {
			if word(l, k, c) {
				return k + len(c)
			}
		}
		return 0
	})
	return at, n
}

func findTraversal(l string) (int, int) {
	at, n := findAny(l, "../", "..%2f", "%2e%2e/", "%2e%2e%2f", `..\`, "..%5c", `%2e%2e\`, "%2e%2e%5c")
	return at, n
}

func findSQLi(l string) (int, int) {
	// union [all] select
	for off := 0; ; {
		i := index(l[off:], "union")
		if i < 0 {
			break
		}
		i += off
		j, n := skipWS(l, i+5)
		if n > 0 && word(l, j, "all") {
			j, n = skipWS(l, j+3)
		}
		if n > 0 && hasPrefix(l[j:], "select") {
			return i, j + 6 - i
		}
		off = i + 5
	}
	// a quote closing a string, then or <x>=<y>: ' or '1'='1, " or 1=1
	for i := 0; i < len(l); i++ {
		var j int
		switch {
		case l[i] == '\'' || l[i] == '"':
			j = i + 1
		case hasPrefix(l[i:], "%27") || hasPrefix(l[i:], "%22"):
			j = i + 3
		default:
			continue
		}
		j, _ = skipWS(l, j)
		if !word(l, j, "or") {
			continue
		}
		j, n := skipWS(l, j+2)
		if n == 0 {
			continue
		}
		// an operand: optional quote, up to 16 word bytes, optional quote
		k := j
		k += quote(l, k)
		w := k
		for k < len(l) && k-w < 16 && isAlnum(l[k]) {
			k++
		}
		if k == w {
			continue
		}
		k += quote(l, k)
		k, _ = skipWS(l, k)
		if k < len(l) && l[k] == '=' {
			return i, k + 1 - i
		}
	}
	// ; drop table
	if at, n := semis(l, func(j int) int {
		k, _ := skipWS(l, j)
		if !word(l, k, "drop") {
			return 0
		}
		m, c := skipWS(l, k+4)
		if c > 0 && word(l, m, "table") {
			return m + 5
		}
		return 0
	}); n > 0 {
		return at, n
	}
	// sleep(<digit>
	for off := 0; ; {
		i := index(l[off:], "sleep(")
		if i < 0 {
			break
		}
		i += off
		j, _ := skipWS(l, i+6)
		if j < len(l) && '0' <= l[j] && l[j] <= '9' {
			return i, j + 1 - i
		}
		off = i + 6
	}
	return findAny(l, "benchmark(")
}

// quote is the length of a quote (', ", or their encodings) at l[i:].
func quote(l string, i int) int {
	switch {
	case i < len(l) && (l[i] == '\'' || l[i] == '"'):
		return 1
	case hasPrefix(l[i:], "%27") || hasPrefix(l[i:], "%22"):
		return 3
	}
	return 0
}

func findXSS(l string) (int, int) {
	if at, n := findAny(l, "<script", "%3cscript", "javascript:"); n > 0 {
		return at, n
	}
	for _, h := range [...]string{"onerror", "onload"} {
		for off := 0; ; {
			i := index(l[off:], h)
			if i < 0 {
				break
			}
			i += off
			j, _ := skipWS(l, i+len(h))
			if j < len(l) && l[j] == '=' || hasPrefix(l[j:], "%3d") {
				return i, j + 1 - i
			}
			off = i + len(h)
		}
	}
	return -1, 0
}
