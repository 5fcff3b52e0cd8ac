package server

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/berth-dev/berth/internal/telemetry"
	"github.com/berth-dev/berth/internal/vm"
)

// replicaLogsEvery is how often the replica log tailer looks for new
// replicas.
const replicaLogsEvery = 2 * time.Second

// runReplicaLogs copies every vm deployment's replicas' output into the
// telemetry store: each replica found is followed (vm.LogFollower) from
// the next line on, after the lines it wrote since this berth started
// (vm.LogReader; older ones a previous berth stored), until it is gone.
// A line written between the two reads is lost: telemetry is lossy.
func (s *Server) runReplicaLogs(ctx context.Context) error {
	if s.telemetry == nil {
		return nil
	}
	started := time.Now()
	following := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	defer func() {
		for _, cancel := range following {
			cancel()
		}
		wg.Wait()
	}()
	t := time.NewTicker(replicaLogsEvery)
	defer t.Stop()
	for {
		seen := map[string]bool{}
		for _, e := range s.registry.List() {
			if e.VMPool == nil {
				continue
			}
			d := e.VMPool.Driver()
			lf, ok := d.(vm.LogFollower)
			if !ok {
				continue
			}
			lr, _ := d.(vm.LogReader)
			ns, dep := cmp.Or(e.Spec.Namespace, "default"), e.Spec.ID
			for _, rep := range e.VMPool.Status().Replicas {
				seen[rep.ID] = true
				if following[rep.ID] != nil {
					continue
				}
				fctx, cancel := context.WithCancel(ctx)
				following[rep.ID] = cancel
				w := &replicaLines{t: s.telemetry, ns: ns, dep: dep, replica: rep.ID}
				wg.Go(func() {
					if lr != nil {
						lines, _ := lr.Logs(fctx, rep.ID, 1000)
						for _, l := range lines {
							if !l.Time.Before(started) {
								w.line(l.Time, l.Stream, l.Text)
							}
						}
					}
					lf.FollowLogs(fctx, rep.ID, w)
				})
			}
		}
		for id, cancel := range following {
			if !seen[id] {
				cancel()
				delete(following, id)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// replicaLines turns a follower's JSON lines ({"t","s","m"}, the agent's
// log format) into telemetry lines.
type replicaLines struct {
	t                *telemetry.Store
	ns, dep, replica string
	buf              []byte
}

func (w *replicaLines) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		var l struct {
			T time.Time `json:"t"`
			S string    `json:"s"`
			M string    `json:"m"`
		}
		if json.Unmarshal(w.buf[:i], &l) == nil {
			w.line(l.T, l.S, l.M)
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<20 { // no newline in a megabyte: not the format
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *replicaLines) line(at time.Time, stream, text string) {
	w.t.Line(telemetry.Line{Time: at, Namespace: w.ns, Deployment: w.dep, Source: cmp.Or(stream, "stdout"), Message: text, Backend: w.replica})
}
