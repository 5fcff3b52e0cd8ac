// Package agentbin makes the berth binary runnable inside a sandbox whose
// root filesystem is not the host's: a container's image or a VM guest.
//
// A statically linked berth (CGO_ENABLED=0) runs anywhere as it is. A
// dynamically linked one (the default `go build` or `go run` on a machine
// with a C compiler: package net and os/user link against libc) needs its
// ELF interpreter and shared libraries, which an image may not have, or
// have in other versions. Bundle copies them, resolved on the host, into a
// directory that the sandbox mounts beside the binary, and Command runs the
// binary through that interpreter with that library path, so the
// sandbox's own libraries are never used.
package agentbin

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
)

// Bin is a berth binary and, when it is dynamically linked, the bundle of
// its interpreter and libraries.
type Bin struct {
	// Path is the binary on the host.
	Path string
	// Interp is the base name of the ELF interpreter inside LibDir; empty
	// for a static binary.
	Interp string
	// LibDir is the host directory holding the interpreter and the
	// libraries (empty for a static binary).
	LibDir string
}

// Static reports whether the binary needs nothing beside itself.
func (b Bin) Static() bool { return b.Interp == "" }

// Command returns the argv that runs the binary, seen inside the sandbox
// at bin, with the bundle mounted at libDir, with args: for a static
// binary bin itself; otherwise the interpreter with --library-path, so
// that the program sees bin as its argv[0].
func (b Bin) Command(bin, libDir string, args ...string) []string {
	if b.Static() {
		return append([]string{bin}, args...)
	}
	return append([]string{libDir + "/" + b.Interp, "--inhibit-cache", "--library-path", libDir, bin}, args...)
}

// libDirs are where shared libraries are looked for on the host, after
// the binary's own DT_RUNPATH/DT_RPATH.
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// Bundle returns path as a Bin. A static binary is returned as it is; for
// a dynamic one the interpreter and every library it needs, transitively,
// are copied into dir (created if missing, its old files replaced), each
// under its DT_NEEDED name.
func Bundle(path, dir string) (Bin, error) {
	b := Bin{Path: path}
	interp, needed, rpath, err := inspect(path)
	if err != nil {
		return b, err
	}
	if interp == "" {
		return b, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return b, fmt.Errorf("agentbin: %w", err)
	}
	b.Interp, b.LibDir = filepath.Base(interp), dir
	if err := copyFile(interp, filepath.Join(dir, b.Interp)); err != nil {
		return b, err
	}
	seen := map[string]bool{b.Interp: true}
	type lib struct {
		name  string
		rpath []string
	}
	queue := []lib{}
	for _, n := range needed {
		queue = append(queue, lib{n, rpath})
	}
	for len(queue) > 0 {
		l := queue[0]
		queue = queue[1:]
		if seen[l.name] {
			continue
		}
		seen[l.name] = true
		src, err := find(l.name, l.rpath)
		if err != nil {
			return b, fmt.Errorf("agentbin: %s needs %s: %w", path, l.name, err)
		}
		if err := copyFile(src, filepath.Join(dir, l.name)); err != nil {
			return b, err
		}
		_, more, rp, err := inspect(src)
		if err != nil {
			return b, err
		}
		for _, n := range more {
			queue = append(queue, lib{n, rp})
		}
	}
	return b, nil
}

// IsStatic reports whether the ELF executable at path is statically
// linked: it has no program interpreter, so it runs in any sandbox as it
// is, where a dynamic one needs Bundle. Hosts check with it before they
// hand a binary to a sandbox that cannot take a bundle (a guest's
// initramfs, the firecracker driver's agent).
func IsStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("agentbin: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}

// inspect returns an ELF file's interpreter, DT_NEEDED libraries and
// run paths.
func inspect(path string) (interp string, needed, rpath []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", nil, nil, fmt.Errorf("agentbin: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return "", nil, nil, fmt.Errorf("agentbin: reading %s's interpreter: %w", path, err)
		}
		if n := len(b); n > 0 && b[n-1] == 0 {
			b = b[:n-1]
		}
		interp = string(b)
	}
	needed, err = f.ImportedLibraries()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return "", nil, nil, fmt.Errorf("agentbin: %s: %w", path, err)
	}
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		if v, err := f.DynString(tag); err == nil {
			for _, s := range v {
				rpath = append(rpath, filepath.SplitList(s)...)
			}
		}
	}
	return interp, needed, rpath, nil
}

// find looks a library up in rpath, then in libDirs.
func find(name string, rpath []string) (string, error) {
	if filepath.IsAbs(name) {
		return name, nil
	}
	for _, d := range slices.Concat(rpath, libDirs) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in %v", libDirs)
}

// copyFile copies src (following links) to dst, replacing it atomically.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("agentbin: %w", err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-*")
	if err != nil {
		return fmt.Errorf("agentbin: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("agentbin: copying %s: %w", src, err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("agentbin: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("agentbin: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("agentbin: %w", err)
	}
	return nil
}
