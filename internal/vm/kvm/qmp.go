package kvm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// QMP, the QEMU Machine Protocol: JSON objects, one per line, over the
// unix socket QEMU serves (-qmp unix:<dir>/qmp.sock,server=on,wait=off).
// QEMU greets with {"QMP": ...}; the client must send qmp_capabilities
// before any command; every command is answered {"return": ...} or
// {"error": {"class", "desc"}}, and asynchronous {"event": ...} objects may
// come in between. QEMU serves one client at a time, so every call
// connects, runs one command and disconnects.

// qmpPatience bounds a QMP exchange when ctx has no deadline.
const qmpPatience = 10 * time.Second

// qmpError is a command's {"error"} answer.
type qmpError struct {
	Class string `json:"class"`
	Desc  string `json:"desc"`
}

func (e *qmpError) Error() string { return fmt.Sprintf("qmp: %s: %s", e.Class, e.Desc) }

// qmpReply is one object QEMU sends.
type qmpReply struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *qmpError       `json:"error"`
	Event  string          `json:"event"`
}

// qmpRun runs one command (args may be nil) on the QMP socket at path and
// returns its answer.
func qmpRun(ctx context.Context, path, command string, args any) error {
	_, err := qmpCall(ctx, path, command, args)
	return err
}

func qmpCall(ctx context.Context, path, command string, args any) (json.RawMessage, error) {
	var dialer net.Dialer
	c, err := dialer.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp: %w", err)
	}
	defer c.Close()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(qmpPatience)
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()

	r := bufio.NewReader(c)
	read := func() (qmpReply, error) {
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				if cerr := ctx.Err(); cerr != nil {
					return qmpReply{}, fmt.Errorf("qmp: %w", cerr)
				}
				if errors.Is(err, os.ErrDeadlineExceeded) && ok {
					// The connection's deadline is ctx's; its timer may
					// not have fired yet.
					return qmpReply{}, fmt.Errorf("qmp: %w", context.DeadlineExceeded)
				}
				return qmpReply{}, fmt.Errorf("qmp: reading: %w", err)
			}
			var m qmpReply
			if err := json.Unmarshal(line, &m); err != nil {
				return qmpReply{}, fmt.Errorf("qmp: malformed message %q: %w", line, err)
			}
			if m.Event == "" {
				return m, nil
			}
		}
	}
	exchange := func(command string, args any) (json.RawMessage, error) {
		req := map[string]any{"execute": command}
		if args != nil {
			req["arguments"] = args
		}
		b, err := json.Marshal(req)
		if err != nil {
			return nil, err
		}
		if _, err := c.Write(append(b, '\n')); err != nil {
			return nil, fmt.Errorf("qmp: %w", err)
		}
		m, err := read()
		if err != nil {
			return nil, err
		}
		if m.Error != nil {
			return nil, m.Error
		}
		if m.Return == nil {
			return nil, errors.New("qmp: an answer without return or error")
		}
		return m.Return, nil
	}
	greeting, err := read()
	if err != nil {
		return nil, err
	}
	if greeting.QMP == nil {
		return nil, errors.New("qmp: no greeting")
	}
	if _, err := exchange("qmp_capabilities", nil); err != nil {
		return nil, err
	}
	return exchange(command, args)
}

// qmpStatus returns the VM's run state ("running", "paused", ...).
func qmpStatus(ctx context.Context, path string) (string, error) {
	raw, err := qmpCall(ctx, path, "query-status", nil)
	if err != nil {
		return "", err
	}
	var s struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("qmp: query-status: %w", err)
	}
	return s.Status, nil
}
