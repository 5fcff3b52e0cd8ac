//go:build unix

package proxy

import "syscall"

// peeker checks an idle connection's socket without blocking. There is one
// per connection, its callback bound once, so that the check on every reuse
// allocates nothing.
type peeker struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool
	alive bool
}

func newPeeker(rc syscall.RawConn) *peeker {
	p := &peeker{rc: rc}
	p.fn = p.peek
	return p
}

// check peeks at the socket: would-block means open and quiet, anything
// else (EOF, data, an error) means not reusable.
func (p *peeker) check() bool {
	p.alive = false
	err := p.rc.Read(p.fn)
	return err == nil && p.alive
}

func (p *peeker) peek(fd uintptr) bool {
	p.alive = quiet(fd)
	return true // never wait for readability
}
