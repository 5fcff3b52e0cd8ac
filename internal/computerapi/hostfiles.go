package computerapi

import (
	"context"
	"io"
	"os"

	"github.com/berth-dev/berth/internal/computer"
)

// workspaces is what the host-side file fast path needs of the manager
// beyond Manager (package computer's *Manager has it): where a Computer's
// workspace is on this host.
type workspaces interface {
	Workspace(id string) string
}

// hostWorkspace returns the host directory to write Computer id's files
// in directly, or "" when they must go through its agent. The caller
// holds a use of the Computer, so it runs, on the backing that Get
// reports, until the use is released.
//
// Directly is right only where the agent's root is that very directory and
// the agent writes with berth's credentials, so that a file written here
// is the file the agent would have written, owner and all:
//
//   - process: the agent runs on the host with --root <workspace>, as
//     berth's own user and group; as root, its sandbox's uid owns the
//     workspace, and agent.WriteFile, like the agent, gives what it makes
//     in a workspace the workspace's owner;
//   - platform-container: <workspace> is bind-mounted at the agent's root
//     /workspace, and the agent is uid 0 and gid 0 without a user
//     namespace; the container driver only runs as root, and berth must
//     be in group 0 too for the files to match.
//
// VMs see the workspace over 9p, whose guest caches would not see a host
// write at once; they, and any backing not known here, go through the
// agent.
func (a *API) hostWorkspace(ctx context.Context, id string) string {
	ws, ok := a.o.Manager.(workspaces)
	if !ok {
		return ""
	}
	comp, err := a.o.Manager.Get(ctx, id)
	if err != nil {
		return "" // the agent's path reports whatever is wrong
	}
	switch comp.Active.Kind {
	case computer.KindProcess:
	case computer.KindContainer:
		if os.Geteuid() != 0 || os.Getegid() != 0 {
			return ""
		}
	default:
		return ""
	}
	return ws.Workspace(id)
}

// readErr remembers the error its reader last returned, so that a
// failure of the request body is told from one of the file.
type readErr struct {
	r   io.Reader
	err error
}

func (r *readErr) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil {
		r.err = err
	}
	return n, err
}
