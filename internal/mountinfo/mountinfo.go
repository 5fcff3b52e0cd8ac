// Package mountinfo reads /proc/self/mountinfo: the mounts of berth's own
// mount namespace. It is a leaf: the image store (which trees a replica's
// overlay uses) and the image builder (what a build left mounted) read it.
package mountinfo

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"strings"
)

// Mount is one line of mountinfo, its paths unescaped.
type Mount struct {
	Root   string // the path in the source file system that is mounted
	Point  string // where it is mounted
	FSType string
	Source string
	// SuperOptions are the file system's own options, as written (an
	// overlay's lowerdir=…, say); Option reads one.
	SuperOptions string
}

// Option returns the value of the super option key (key=value), unescaped.
func (m Mount) Option(key string) (string, bool) {
	for _, o := range strings.Split(m.SuperOptions, ",") {
		if v, ok := strings.CutPrefix(o, key+"="); ok {
			return Unescape(v), true
		}
	}
	return "", false
}

// Read returns the mounts of this process's mount namespace; a host
// without /proc/self/mountinfo (not Linux) has none.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(f)
}

// Parse reads mountinfo lines ("id parent major:minor root point options
// [optional fields] - fstype source superoptions"); malformed lines are
// skipped.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 2 {
			continue
		}
		m := Mount{Root: Unescape(lf[3]), Point: Unescape(lf[4]), FSType: rf[0], Source: Unescape(rf[1])}
		if len(rf) > 2 {
			m.SuperOptions = rf[2]
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// Unescape undoes mountinfo's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) && s[i+1] <= '3' {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
