package process

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
)

// readySpares waits until d has n ready spares and returns their pids.
func readySpares(t *testing.T, d *Driver, n int) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pids []int
		for _, sp := range d.pool.Ready(struct{}{}) {
			pids = append(pids, sp.pid)
		}
		if len(pids) == n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spares ready, want %d", len(pids), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// niceValues returns the nice values of pid's threads.
func niceValues(t *testing.T, pid int) []int {
	t.Helper()
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + task.Name() + "/stat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		n, _ := strconv.Atoi(f[19-3])
		out = append(out, n)
	}
	return out
}

// spareDirs lists the spare directories under dir.
func spareDirs(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), sparePrefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func body(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestSpares checks that a Start after the first hands the replica to a
// spare agent, which then is that replica's in every way a cold-started
// agent is: paths, environment, working directory, hooks, host name,
// command line; that spares are topped up, never listed, and cleaned up by
// Close and by a new Driver over the same Dir.
func TestSpares(t *testing.T) {
	for _, isolate := range modes(t) {
		t.Run(modeName(isolate), func(t *testing.T) {
			dir := shortTempDir(t)
			t.Cleanup(func() { checkNoProcesses(t, dir) })
			d := newDriver(t, dir, isolate)
			if got := spareDirs(t, dir); len(got) != 0 {
				t.Errorf("spares before any Start: %v", got)
			}
			first := vm.Name("spare", 1)
			if _, err := d.Start(t.Context(), vm.Spec{Name: first, Command: appCommand(t, "app")}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Stop(context.Background(), first, time.Second) })
			spares := readySpares(t, d, DefaultSpares)
			if got := spareDirs(t, dir); len(got) != DefaultSpares {
				t.Errorf("spare directories %v, want %d", got, DefaultSpares)
			}
			list, err := d.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != 1 || list[0].ID != first {
				t.Errorf("List = %+v, want only %s", list, first)
			}

			raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0)
			if err != nil {
				t.Fatal(err)
			}
			ours := 20 - raw
			if os.Geteuid() == 0 {
				for _, pid := range spares {
					for _, n := range niceValues(t, pid) {
						if n != spareNice {
							t.Errorf("a spare's thread runs at nice %d, want %d", n, spareNice)
						}
					}
				}
			}

			id := vm.Name("spare", 2)
			spec := vm.Spec{
				Name:       id,
				Command:    "cat /proc/sys/kernel/hostname > host.txt; " + appCommand(t, "envapp"),
				Env:        map[string]string{"GREETING": "hello from a spare"},
				WorkDir:    "sub",
				SetupHooks: []string{"echo hooked > hook.txt"},
				TTL:        time.Hour,
			}
			inst, err := d.Start(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
			if !slices.Contains(spares, inst.PID) {
				t.Fatalf("the replica's agent %d is none of the spares %v", inst.PID, spares)
			}
			for _, n := range niceValues(t, inst.PID) {
				if n != ours {
					t.Errorf("an assigned spare's thread runs at nice %d, want berth's %d", n, ours)
				}
			}
			inst = waitServing(t, d, id)
			wd := filepath.Join(dir, id, dataDir, "sub")
			lines := strings.Split(body(t, inst.Addr), "\n")
			if len(lines) < 3 || lines[0] != "hello from a spare" || lines[1] != wd || lines[2] != "hooked" {
				t.Errorf("the app says %q, want the greeting, %s and the hook's output", lines, wd)
			}
			if isolate {
				host, _ := os.ReadFile(filepath.Join(wd, "host.txt"))
				if got := strings.TrimSpace(string(host)); got != id {
					t.Errorf("hostname inside = %q, want %q", got, id)
				}
			}
			cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(inst.PID) + "/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
			for _, want := range []string{"unix:" + filepath.Join(dir, id, sockFile), filepath.Join(dir, id, exitFile)} {
				if !slices.Contains(args, want) {
					t.Errorf("the agent's command line %q lacks %q", args, want)
				}
			}
			if bytes.Contains(cmdline, []byte(sparePrefix)) {
				t.Errorf("the agent's command line still names its spare directory: %q", args)
			}
			// Execs get the replica's environment and working directory.
			c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) })
			defer c.Close()
			res, err := c.Exec(t.Context(), agent.ExecRequest{Command: `echo "$PORT $GREETING $HOME $PWD"`})
			if err != nil {
				t.Fatal(err)
			}
			_, port, _ := strings.Cut(inst.Addr, ":")
			if want := port + " hello from a spare " + filepath.Join(dir, id, dataDir) + " " + wd + "\n"; res.Stdout != want {
				t.Errorf("an exec sees %q, want %q", res.Stdout, want)
			}
			if b, err := os.ReadFile(filepath.Join(dir, id, leaseFile)); err != nil || len(b) == 0 {
				t.Errorf("no lease file for a replica with a TTL: %v", err)
			}
			if got, err := d.Inspect(t.Context(), id); err != nil || got.State != vm.StateRunning || got.PID != inst.PID {
				t.Errorf("Inspect = %+v, %v; want running with pid %d", got, err, inst.PID)
			}

			// Topped up again, with a new spare.
			again := readySpares(t, d, DefaultSpares)
			if slices.Contains(again, inst.PID) {
				t.Errorf("the assigned agent %d is still listed as a spare", inst.PID)
			}
			if err := d.Stop(t.Context(), id, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			waitGone(t, inst.PID)

			// A new driver over the same Dir (a berth restart) kills the
			// spares it finds, and adopts the replica.
			d2, err := New(func() Options { o := options(t, dir, isolate); o.Spares = new(0); return o }())
			if err != nil {
				t.Fatal(err)
			}
			for _, pid := range again {
				waitGone(t, pid)
			}
			if got := spareDirs(t, dir); len(got) != 0 {
				t.Errorf("spare directories after a new driver: %v", got)
			}
			if list, err := d2.List(t.Context()); err != nil || len(list) != 1 || list[0].ID != first {
				t.Errorf("the new driver lists %+v, %v; want %s", list, err, first)
			}
			// The first driver's spares are gone: it starts cold, and well.
			third := vm.Name("spare", 3)
			if _, err := d.Start(t.Context(), vm.Spec{Name: third, Command: appCommand(t, "app")}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Stop(context.Background(), third, time.Second) })
			waitServing(t, d, third)
			readySpares(t, d, DefaultSpares)
			d.Close()
			if got := spareDirs(t, dir); len(got) != 0 {
				t.Errorf("spare directories after Close: %v", got)
			}
		})
	}
}

// TestDeadSpare checks that a spare that died is not handed a replica: the
// Start runs cold.
func TestDeadSpare(t *testing.T) {
	dir := shortTempDir(t)
	t.Cleanup(func() { checkNoProcesses(t, dir) })
	o := options(t, dir, os.Geteuid() == 0)
	o.Spares = new(1)
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	first := vm.Name("dead", 1)
	if _, err := d.Start(t.Context(), vm.Spec{Name: first, Command: appCommand(t, "app")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), first, time.Second) })
	spare := readySpares(t, d, 1)[0]
	syscall.Kill(spare, syscall.SIGKILL)
	waitGone(t, spare)
	id := vm.Name("dead", 2)
	inst, err := d.Start(t.Context(), vm.Spec{Name: id, Command: appCommand(t, "app")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
	if inst.PID == spare {
		t.Errorf("the replica got the dead spare %d", spare)
	}
	waitServing(t, d, id)
}

func TestListening(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	// Many other sockets, so the tables span more than one read, and a
	// connected socket on the port, which is not a listener.
	var conns []net.Conn
	for range 200 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	up, buf := listening(port, nil)
	if !up {
		t.Errorf("listening(%d) = false with a listener", port)
	}
	if up, _ := listening(port+1, buf); up && port+1 < 65536 {
		if l2, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+1)); err == nil {
			l2.Close()
			t.Errorf("listening(%d) = true with no listener there", port+1)
		}
	}
	ln.Close()
	for _, c := range conns {
		c.Close()
	}
	if up, _ := listening(port, buf); up {
		t.Errorf("listening(%d) = true after the listener closed", port)
	}
	// An IPv6 listener is found too.
	if l6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		p6 := l6.Addr().(*net.TCPAddr).Port
		if up, _ := listening(p6, nil); !up {
			t.Errorf("listening(%d) = false with an IPv6 listener", p6)
		}
		l6.Close()
	}
}

// BenchmarkListening is one look for a listener.
func BenchmarkListening(b *testing.B) {
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		_, buf = listening(1, buf)
	}
}

// TestNoSpares checks that Spares 0 starts none.
func TestNoSpares(t *testing.T) {
	dir := shortTempDir(t)
	o := options(t, dir, mustIsolate)
	o.Spares = new(0)
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	id := vm.Name("nospare", 1)
	if _, err := d.Start(t.Context(), vm.Spec{Name: id, Command: appCommand(t, "app")}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
	waitServing(t, d, id)
	if got := spareDirs(t, dir); len(got) != 0 {
		t.Errorf("spare directories with Spares 0: %v", got)
	}
	if _, err := New(Options{Dir: dir, Spares: new(-1)}); err == nil {
		t.Error("New accepted a negative Spares")
	}
}

// TestPrewarm: Prewarm starts the spares without any Start, so that the
// first Start after New takes one (its agent is a spare's pid); calling it
// again, as berth does for each deployment that scales from zero, starts
// no more than Spares.
func TestPrewarm(t *testing.T) {
	dir := shortTempDir(t)
	t.Cleanup(func() { checkNoProcesses(t, dir) })
	d := newDriver(t, dir, mustIsolate)
	if got := spareDirs(t, dir); len(got) != 0 {
		t.Fatalf("spares before Prewarm: %v", got)
	}
	d.Prewarm(vm.Spec{Command: "app"})
	d.Prewarm(vm.Spec{Command: "another app"})
	spares := readySpares(t, d, DefaultSpares)
	if got := spareDirs(t, dir); len(got) != DefaultSpares {
		t.Errorf("spare directories after two Prewarms: %v, want %d", got, DefaultSpares)
	}
	id := vm.Name("prewarm", 1)
	inst, err := d.Start(t.Context(), vm.Spec{Name: id, Command: appCommand(t, "app")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background(), id, time.Second) })
	var st state
	b, err := os.ReadFile(filepath.Join(dir, id, stateFile))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(spares, st.PID) {
		t.Errorf("the first Start's agent is pid %d, not one of the prewarmed spares %v", st.PID, spares)
	}
	waitServing(t, d, inst.ID)
}
