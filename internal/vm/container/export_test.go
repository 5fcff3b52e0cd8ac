package container

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/image"
	"github.com/berth-dev/berth/internal/vm/vmtest"
)

// SharedEnv gives the package's external tests (the gateway tests, which
// import package server and so cannot live in package container) the
// shared environment: the static agent, the image store and the busybox
// tree it was imported from.
func SharedEnv(t testing.TB) (agent string, images *image.Store, busyboxRootfs string) {
	e := setup(t)
	root, err := e.images.Rootfs("busybox")
	if err != nil {
		t.Fatal(err)
	}
	return e.agent, e.images, root
}

// App is the trivial busybox httpd app of the tests.
const App = app

// ReapSpares removes every spare container under dir (a Driver's Dir),
// live or not: the gateway tests' servers do not close their drivers.
func ReapSpares(t testing.TB, dir string) {
	e := setup(t)
	d := newDriverAt(t, e, dir)
	d.reapSpares(true)
}

// WaitSpares waits (up to 30 s, then fails t) until n spare containers
// under dir (a Driver's Dir) answer on their agent's socket: a scale from
// zero follows a quiet spell in which the driver made them.
func WaitSpares(t testing.TB, dir string, n int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ready := vmtest.AnsweringSockets(filepath.Join(dir, sparePrefix+"*", runDir, sockFile))
		if ready >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d spare containers ready after 30s", ready, n)
		}
	}
}
