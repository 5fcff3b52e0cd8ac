package agent

import (
	"errors"
	"os"
	"strings"
	"unsafe"
)

// procArgs is the process's argv as the runtime found it: os.Args before
// anyone replaced it. Its strings are the kernel's argv block itself,
// which is what /proc/PID/cmdline shows.
var procArgs = os.Args

// rewriteArgs replaces orig — Main's arguments, the tail of the process's
// argv — in the argv block with assigned, so /proc/PID/cmdline (and ps)
// show the process's leading arguments followed by assigned. Arguments that
// do not fit in the block (its size is fixed at exec; --spare-room makes
// room) are left out from the end, and the rest of the block is zeroed.
// Main must hold no string of orig any more: their bytes change.
//
// It works only when orig really is that tail, as the runtime gave it
// (not a copy), and the block is laid out as the kernel does: each string
// right after the previous one's terminating NUL.
func rewriteArgs(orig, assigned []string) error {
	n := len(orig)
	if n == 0 || len(procArgs) < n {
		return errors.New("no process arguments to rewrite")
	}
	tail := procArgs[len(procArgs)-n:]
	for i := range orig {
		if len(orig[i]) == 0 || len(orig[i]) != len(tail[i]) || unsafe.StringData(orig[i]) != unsafe.StringData(tail[i]) {
			return errors.New("the arguments are not the process's own")
		}
		if i > 0 && unsafe.StringData(orig[i]) != (*byte)(unsafe.Add(unsafe.Pointer(unsafe.StringData(orig[i-1])), len(orig[i-1])+1)) {
			return errors.New("the process's arguments are not laid out contiguously")
		}
	}
	// os.Args keeps what the process was started with, in memory of its
	// own.
	args := make([]string, len(os.Args))
	for i, a := range os.Args {
		args[i] = strings.Clone(a)
	}
	os.Args = args
	start := unsafe.StringData(orig[0])
	size := int(uintptr(unsafe.Pointer(unsafe.StringData(orig[n-1])))-uintptr(unsafe.Pointer(start))) + len(orig[n-1]) + 1
	block := unsafe.Slice(start, size)
	at := 0
	for _, a := range assigned {
		if at+len(a)+1 > size {
			break
		}
		copy(block[at:], a)
		block[at+len(a)] = 0
		at += len(a) + 1
	}
	clear(block[at:])
	return nil
}
