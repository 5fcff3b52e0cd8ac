package admin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
)

type dialer struct{ dials int }

func (d *dialer) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	d.dials++
	return nil, errors.New("no agent")
}

// TestAgentClientsKept: the admin API keeps one agent client per replica
// (so execs reuse its kept-alive connection), and at most maxAgentClients.
func TestAgentClientsKept(t *testing.T) {
	var ac agentClients
	d, other := &dialer{}, &dialer{}
	a := ac.get(d, "r1")
	if ac.get(d, "r1") != a {
		t.Error("a second get of the same replica made a new client")
	}
	if ac.get(d, "r2") == a || ac.get(other, "r1") == a {
		t.Error("another replica shares a client")
	}
	for i := range maxAgentClients + 10 {
		ac.get(d, fmt.Sprint("x", i))
	}
	if n := ac.len(); n != maxAgentClients {
		t.Errorf("kept %d clients, want %d", n, maxAgentClients)
	}
	if ac.get(d, "r1") == a {
		t.Error("the least recently used client was not dropped")
	}
}
