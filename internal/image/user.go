package image

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
)

// User is an image config's user resolved against the image's own
// /etc/passwd and /etc/group (never the host's).
type User struct {
	UID, GID uint32
	Groups   []uint32 // supplementary: the groups of /etc/group that list the user's name
	Home     string   // from /etc/passwd; "" when the user has no entry
}

// Root reports whether u is root with no supplementary groups: the
// drivers' default.
func (u User) Root() bool { return u.UID == 0 && u.GID == 0 && len(u.Groups) == 0 }

// maxAccountFile bounds /etc/passwd and /etc/group as read.
const maxAccountFile = 4 << 20

// ResolveUser resolves an OCI config user — "name", "uid", "name:group",
// "uid:gid" (either side a name or a number) — in the tree rootfs, as
// container engines do: a name must be in the image's /etc/passwd (a
// group name in its /etc/group); a uid without an entry gets gid 0 unless
// the group is given. The files are read through an os.Root of rootfs, so
// a symlink in the image cannot make berth read a file of the host's.
func ResolveUser(rootfs, spec string) (User, error) {
	name, group, hasGroup := strings.Cut(spec, ":")
	if name == "" || hasGroup && group == "" {
		return User{}, fmt.Errorf("user %q: want NAME, UID, NAME:GROUP or UID:GID", spec)
	}
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return User{}, err
	}
	defer root.Close()
	passwd, err := readAccounts(root, "etc/passwd")
	if err != nil {
		return User{}, err
	}
	groups, err := readAccounts(root, "etc/group")
	if err != nil {
		return User{}, err
	}
	var u User
	var entry []string // the passwd line: name, x, uid, gid, gecos, home, shell
	if n, err := parseID(name); err == nil {
		u.UID = n
		for _, f := range passwd {
			if len(f) >= 4 && f[2] == name {
				entry = f
				break
			}
		}
	} else {
		for _, f := range passwd {
			if len(f) >= 4 && f[0] == name {
				entry = f
				break
			}
		}
		if entry == nil {
			return User{}, fmt.Errorf("user %q: no user %q in the image's /etc/passwd", spec, name)
		}
		if u.UID, err = parseID(entry[2]); err != nil {
			return User{}, fmt.Errorf("user %q: the image's /etc/passwd has uid %q for %s", spec, entry[2], name)
		}
	}
	if entry != nil {
		gid, err := parseID(entry[3])
		if err != nil {
			return User{}, fmt.Errorf("user %q: the image's /etc/passwd has gid %q for %s", spec, entry[3], entry[0])
		}
		u.GID = gid
		if len(entry) >= 6 {
			u.Home = entry[5]
		}
	}
	if hasGroup {
		if n, err := parseID(group); err == nil {
			u.GID = n
		} else {
			found := false
			for _, f := range groups {
				if len(f) >= 3 && f[0] == group {
					if u.GID, err = parseID(f[2]); err != nil {
						return User{}, fmt.Errorf("user %q: the image's /etc/group has gid %q for %s", spec, f[2], group)
					}
					found = true
					break
				}
			}
			if !found {
				return User{}, fmt.Errorf("user %q: no group %q in the image's /etc/group", spec, group)
			}
		}
	}
	if entry != nil {
		for _, f := range groups {
			if len(f) < 4 {
				continue
			}
			gid, err := parseID(f[2])
			if err != nil || gid == u.GID {
				continue
			}
			for _, m := range strings.Split(f[3], ",") {
				if m == entry[0] {
					u.Groups = append(u.Groups, gid)
					break
				}
			}
		}
	}
	return u, nil
}

func parseID(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err
}

// readAccounts reads a passwd-style file of the image as lines of fields;
// a missing file is empty.
func readAccounts(root *os.Root, name string) ([][]string, error) {
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("the image's /%s: %w", name, err)
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(f, maxAccountFile))
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	for sc.Scan() {
		ln := strings.TrimSpace(sc.Text())
		if ln == "" || strings.HasPrefix(ln, "#") {
			continue
		}
		out = append(out, strings.Split(ln, ":"))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("the image's /%s: %w", name, err)
	}
	return out, nil
}
