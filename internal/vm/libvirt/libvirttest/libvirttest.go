// Package libvirttest starts a private libvirtd for tests: in the
// caller's network namespace (where its QEMUs find the caller's taps) and
// in a mount namespace of its own, so that the host's libvirt, if any, is
// neither used nor changed. The libvirt driver's tests and the server's
// use it.
package libvirttest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	golibvirt "github.com/digitalocean/go-libvirt"
	"github.com/digitalocean/go-libvirt/socket/dialers"
)

// Bin finds libvirtd, which Debian installs to /usr/sbin
// (libvirt-daemon; scripts/test installs it).
func Bin() (string, error) {
	if p, err := exec.LookPath("libvirtd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/libvirtd"); err != nil {
		return "", err
	}
	return "/usr/sbin/libvirtd", nil
}

// Start starts a libvirtd of the tests' own in their network
// namespace (so its QEMUs find the taps there) and in a mount namespace of
// its own, with fresh directories over the system daemon's state, run,
// log and configuration directories (an overlay over /etc adds what a host
// without libvirt-daemon-system lacks) and a qemu.conf of its own (QEMU as root without
// virtlogd, which is socket-activated by systemd on a real host); it
// listens in dir. It returns how to stop it.
func Start(bin, dir string) (stop func(), socket string, err error) {
	sock := filepath.Join(dir, "sock")
	if err := os.MkdirAll(sock, 0o700); err != nil {
		return nil, "", err
	}
	conf := fmt.Sprintf("unix_sock_dir = %q\nunix_sock_rw_perms = \"0700\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n"+
		"log_outputs = \"3:file:%s\"\n", sock, filepath.Join(dir, "libvirtd.log"))
	qemuConf := "stdio_handler = \"file\"\nuser = \"root\"\ngroup = \"root\"\ndynamic_ownership = 0\nsecurity_driver = \"none\"\nnamespaces = [ ]\n"
	if err := os.WriteFile(filepath.Join(dir, "libvirtd.conf"), []byte(conf), 0o600); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "qemu.conf"), []byte(qemuConf), 0o600); err != nil {
		return nil, "", err
	}
	script := `set -e
for d in /run/libvirt /var/lib/libvirt /var/log/libvirt /var/cache/libvirt; do
	mkdir -p "$d"
	mount -t tmpfs -o mode=0755 tmpfs "$d"
done
# /etc through an overlay, in this mount namespace only, so that what
# libvirtd needs there exists without the host's /etc changing: a fresh
# /etc/libvirt (the host's, if any, stays unseen; libvirt-daemon alone
# makes none) with the qemu.conf, and the user and group libvirt-qemu,
# which the QEMU driver resolves before it reads qemu.conf (Debian's
# libvirt-daemon-system creates them).
mkdir -p "$1/etc"
mount -t tmpfs -o mode=0755 tmpfs "$1/etc"
mkdir "$1/etc/upper" "$1/etc/work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/etc/upper,workdir=$1/etc/work" /etc
mkdir -p /etc/libvirt
mount -t tmpfs -o mode=0755 tmpfs /etc/libvirt
cp "$1/qemu.conf" /etc/libvirt/qemu.conf
getent group libvirt-qemu >/dev/null || echo 'libvirt-qemu:x:64055:' >>/etc/group
getent passwd libvirt-qemu >/dev/null || echo 'libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin' >>/etc/passwd
exec "$2" -f "$1/libvirtd.conf" -p "$1/libvirtd.pid"
`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", dir, bin)
	out, err := os.Create(filepath.Join(dir, "out.log"))
	if err != nil {
		return nil, "", err
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Pdeathsig: a test binary killed before its cleanup takes its
	// libvirtd along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, "", fmt.Errorf("starting libvirtd: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
	socket = filepath.Join(sock, "libvirt-sock")
	exitErr := func() error {
		b, _ := os.ReadFile(filepath.Join(dir, "out.log"))
		l, _ := os.ReadFile(filepath.Join(dir, "libvirtd.log"))
		var errs []string
		for line := range strings.Lines(string(l)) {
			if strings.Contains(line, " error : ") {
				errs = append(errs, strings.TrimSpace(line))
			}
		}
		return fmt.Errorf("libvirtd exited: %s; its errors:\n%s", strings.TrimSpace(string(b)), strings.Join(errs, "\n"))
	}
	for i := 0; i < 600; i++ { // up to a minute
		if c, err := net.Dial("unix", socket); err == nil {
			c.Close()
			// Listening is not initialized: a QEMU driver that fails
			// ends libvirtd after it listened. Answering a connection
			// to qemu:///system is.
			l := golibvirt.NewWithDialer(dialers.NewLocal(dialers.WithSocket(socket), dialers.WithLocalTimeout(5*time.Second)))
			err := l.ConnectToURI(golibvirt.QEMUSystem)
			if err == nil {
				l.Disconnect()
				return stop, socket, nil
			}
		}
		select {
		case <-exited:
			return nil, "", exitErr()
		case <-time.After(100 * time.Millisecond):
		}
	}
	stop()
	return nil, "", fmt.Errorf("libvirtd did not listen on %s within a minute", socket)
}
