package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// privateDirs get an empty tmpfs of the sandbox's own (sticky,
// world-writable), hiding the host's: files other processes leave there.
var privateDirs = []string{"/tmp", "/dev/shm"}

// enterSandbox makes the agent the init of a sandbox: it must be PID 1 of
// its own PID namespace, in a mount namespace of its own, as root. It
//
//   - mounts a /proc of its PID namespace over the host's, so nothing in
//     the sandbox sees (or reads the environment of) other processes;
//   - mounts an empty tmpfs on /tmp and /dev/shm;
//   - hides the directories in hide, and every host directory that others
//     may not search (berth's data directory, say), under an empty tmpfs
//     in which only the paths in expose (the agent's files, the working
//     directory, the root of file operations) reappear, bind-mounted at
//     their own paths;
//   - sets no_new_privs, which its children inherit: no setuid binary
//     gives them back what they lack;
//   - makes every child (hooks, COMMAND, execs, shells, background
//     processes) run as s.uid:s.gid without supplementary groups.
//
// The agent itself stays root: it serves the protocol on a socket only
// root can connect to.
func enterSandbox(s sandboxFlag, expose, hide []string) error {
	if os.Getpid() != 1 {
		return errors.New("the agent must be PID 1 of its own PID namespace")
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	if err := hideHost(expose, hide); err != nil {
		return err
	}
	if err := startForker(); err != nil {
		return err
	}
	sandboxCred = &syscall.Credential{Uid: s.uid, Gid: s.gid, Groups: []uint32{}}
	return nil
}

// startForker starts the thread that starts the agent's children: it has
// no_new_privs, which a thread passes on to the processes it forks. The
// flag is per thread, and the Go runtime's other threads (some made
// before main) do not have it; setting it on every thread
// (syscall.AllThreadsSyscall) fails in binaries linked with cgo.
func startForker() error {
	errc := make(chan error, 1)
	jobs := make(chan func())
	go func() {
		runtime.LockOSThread() // for good: the flag cannot be unset
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			errc <- fmt.Errorf("setting no_new_privs: %w", err)
			return
		}
		errc <- nil
		for f := range jobs {
			f()
		}
	}()
	if err := <-errc; err != nil {
		return err
	}
	forker = jobs
	return nil
}

// hideHost mounts the tmpfs of privateDirs and over the directories that
// hide the paths in expose, and binds those paths back (see enterSandbox).
func hideHost(expose, hide []string) error {
	var paths []string
	for _, p := range expose {
		if p == "" {
			continue
		}
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) {
			return fmt.Errorf("exposed path %q is not absolute", p)
		}
		if _, err := os.Stat(p); err != nil {
			continue // nothing to keep reachable
		}
		paths = append(paths, p)
	}
	slices.Sort(paths)
	paths = slices.Compact(paths)
	// A path inside another comes along with it.
	var outer []string
	for _, p := range paths {
		if len(outer) == 0 || !within(p, outer[len(outer)-1]) {
			outer = append(outer, p)
		}
	}
	// The directories always hidden: the outermost of those that exist.
	var forced []string
	for _, d := range append(slices.Clone(privateDirs), hide...) {
		d = filepath.Clean(d)
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && filepath.IsAbs(d) && d != "/" {
			forced = append(forced, d)
		}
	}
	slices.Sort(forced)
	forced = slices.Compact(forced)
	groups := map[string][]string{} // hiding directory -> paths under it
	for i, d := range forced {
		if i == 0 || !slices.ContainsFunc(forced[:i], func(o string) bool { return within(d, o) }) {
			groups[d] = nil
		}
	}
	for _, p := range outer {
		if h := hiderOf(p, forced); h != "" {
			groups[h] = append(groups[h], p)
		}
	}
	hiders := make([]string, 0, len(groups))
	for h := range groups {
		hiders = append(hiders, h)
	}
	slices.Sort(hiders)
	for _, h := range hiders {
		if err := hideUnder(h, groups[h]); err != nil {
			return err
		}
	}
	return nil
}

// within reports whether p is dir or inside it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// hiderOf returns the directory to hide p's surroundings under: p's
// outermost ancestor that is forced hidden or that others may not search;
// "" when p is reachable as it is.
func hiderOf(p string, forced []string) string {
	dir := "/"
	for _, c := range strings.Split(strings.TrimPrefix(filepath.Dir(p), "/"), "/") {
		if c == "" {
			break
		}
		dir = filepath.Join(dir, c)
		if slices.Contains(forced, dir) {
			return dir
		}
		fi, err := os.Stat(dir)
		if err == nil && fi.Mode().Perm()&0o001 == 0 {
			return dir
		}
	}
	return ""
}

// hideUnder mounts an empty tmpfs on dir and binds each path in paths
// (all inside dir) back at its place, with the directories leading to it
// made in the tmpfs (mode 0755).
func hideUnder(dir string, paths []string) error {
	fds := make([]int, len(paths))
	dirs := make([]bool, len(paths))
	for i, p := range paths {
		fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, fd := range fds[:i] {
				unix.Close(fd)
			}
			return fmt.Errorf("keeping %s: %w", p, err)
		}
		fds[i] = fd
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			dirs[i] = st.Mode&unix.S_IFMT == unix.S_IFDIR
		}
	}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	mode := "mode=0755"
	if slices.Contains(privateDirs, dir) {
		mode = "mode=1777"
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, mode); err != nil {
		return fmt.Errorf("hiding %s: %w", dir, err)
	}
	for i, p := range paths {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("keeping %s: %w", p, err)
		}
		if dirs[i] {
			err := os.Mkdir(p, 0o755)
			if err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("keeping %s: %w", p, err)
			}
		} else if f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644); err != nil {
			return fmt.Errorf("keeping %s: %w", p, err)
		} else {
			f.Close()
		}
		src := "/proc/self/fd/" + strconv.Itoa(fds[i])
		if err := unix.Mount(src, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("keeping %s: %w", p, err)
		}
	}
	return nil
}
