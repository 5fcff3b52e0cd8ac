package process

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// standInAgent honours the agent contract minimally, for testing the driver
// until package agent exports Main: flags, log, setup hooks, command, exit
// file, SIGTERM forwarding and GET /v1/info on the unix socket.
func standInAgent(args []string) int {
	var listen, logPath, exitPath, workDir string
	var setup, command []string
	for i := 0; i < len(args); i++ {
		next := func() string {
			i++
			if i >= len(args) {
				return ""
			}
			return args[i]
		}
		switch args[i] {
		case "--listen":
			listen = next()
		case "--log":
			logPath = next()
		case "--exit-file":
			exitPath = next()
		case "--workdir":
			workDir = next()
		case "--setup":
			setup = append(setup, next())
		case "--":
			command = args[i+1:]
			i = len(args)
		default:
			fmt.Fprintf(os.Stderr, "stand-in agent: unknown flag %q\n", args[i])
			return 2
		}
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	writeLine := func(stream, text string) {
		b, _ := json.Marshal(map[string]string{"t": time.Now().Format(time.RFC3339Nano), "s": stream, "m": text})
		mu.Lock()
		logf.Write(append(b, '\n'))
		mu.Unlock()
	}
	pump := func(stream string, r io.Reader, wg *sync.WaitGroup) {
		defer wg.Done()
		var buf []byte
		p := make([]byte, 4096)
		for {
			n, err := r.Read(p)
			buf = append(buf, p[:n]...)
			for {
				i := strings.IndexByte(string(buf), '\n')
				if i < 0 {
					break
				}
				writeLine(stream, string(buf[:i]))
				buf = buf[i+1:]
			}
			if err != nil {
				if len(buf) > 0 {
					writeLine(stream, string(buf))
				}
				return
			}
		}
	}
	writeExit := func(code int, reason string) {
		b, _ := json.Marshal(map[string]any{"exit_code": code, "reason": reason, "at": time.Now().Format(time.RFC3339Nano)})
		os.WriteFile(exitPath, b, 0o600)
	}
	sock := strings.TrimPrefix(listen, "unix:")
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Chmod(sock, 0o600)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/info", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"version":"stand-in"}`)
	})
	go http.Serve(ln, mux)
	defer ln.Close()

	run := func(argv []string) (*exec.Cmd, *sync.WaitGroup, error) {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = workDir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, _ := cmd.StdoutPipe()
		errOut, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go pump("stdout", out, &wg)
		go pump("stderr", errOut, &wg)
		return cmd, &wg, nil
	}
	for _, h := range setup {
		cmd, wg, err := run([]string{"/bin/sh", "-c", h})
		if err != nil {
			writeExit(1, fmt.Sprintf("setup hook %q: %v", h, err))
			return 1
		}
		wg.Wait()
		if err := cmd.Wait(); err != nil {
			code := cmd.ProcessState.ExitCode()
			writeExit(code, fmt.Sprintf("setup hook %q exited with code %d", h, code))
			return code
		}
	}
	if len(command) == 0 {
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		return 0
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	cmd, wg, err := run(command)
	if err != nil {
		writeExit(127, err.Error())
		return 127
	}
	go func() {
		for s := range sig {
			syscall.Kill(-cmd.Process.Pid, s.(syscall.Signal))
		}
	}()
	wg.Wait()
	cmd.Wait()
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		writeExit(-1, fmt.Sprintf("killed by signal %d", ws.Signal()))
		return 128 + int(ws.Signal())
	}
	writeExit(ws.ExitStatus(), fmt.Sprintf("exited with code %d", ws.ExitStatus()))
	return ws.ExitStatus()
}
