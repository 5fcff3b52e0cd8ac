package admin

import (
	"container/list"
	"context"
	"net"
	"sync"

	"github.com/berth-dev/berth/internal/agent"
	"github.com/berth-dev/berth/internal/vm"
)

// maxAgentClients bounds the agent clients the admin API keeps: one per
// replica that was exec'd into or shelled, least recently used dropped.
const maxAgentClients = 128

// agentClients keeps one agent.Client per replica, so that execs reuse a
// kept-alive connection to its agent instead of dialling (and, with a
// client per request, leaving an idle connection behind each time).
// A client of a replica that is gone costs nothing but its entry: its
// connections closed with the agent.
type agentClients struct {
	mu  sync.Mutex
	lru *list.List // of *agentEntry, most recent first
	by  map[agentKey]*list.Element
}

type agentKey struct {
	d       vm.AgentDialer
	sandbox string
}

type agentEntry struct {
	key agentKey
	c   *agent.Client
}

func (ac *agentClients) get(d vm.AgentDialer, sandbox string) *agent.Client {
	k := agentKey{d, sandbox}
	ac.mu.Lock()
	defer ac.mu.Unlock()
	if ac.by == nil {
		ac.by = map[agentKey]*list.Element{}
		ac.lru = list.New()
	}
	if el, ok := ac.by[k]; ok {
		ac.lru.MoveToFront(el)
		return el.Value.(*agentEntry).c
	}
	c := agent.NewClient(func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, sandbox) })
	ac.by[k] = ac.lru.PushFront(&agentEntry{k, c})
	for ac.lru.Len() > maxAgentClients {
		el := ac.lru.Back()
		e := ac.lru.Remove(el).(*agentEntry)
		delete(ac.by, e.key)
		e.c.Close()
	}
	return c
}

// len returns how many clients are kept (tests).
func (ac *agentClients) len() int {
	ac.mu.Lock()
	defer ac.mu.Unlock()
	return len(ac.by)
}
