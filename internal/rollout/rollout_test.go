package rollout

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/berth-dev/berth/internal/fleet"
	"github.com/berth-dev/berth/internal/store"
)

// TestSettle: operations a killed berth left running are settled from
// the stored spec and their phase: one whose candidates were all ready
// succeeded, one still booting candidates failed and its spec went back
// to the fallback, one whose spec a newer write replaced failed alone.
func TestSettle(t *testing.T) {
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	specA := []byte(`{"id":"%s","vm":{"driver":"process","port":8080,"env_vars":{"R":"a"}}}`)
	specB := []byte(`{"id":"%s","vm":{"driver":"process","port":8080,"env_vars":{"R":"b"}}}`)
	specC := []byte(`{"id":"%s","vm":{"driver":"process","port":8080,"env_vars":{"R":"c"}}}`)
	of := func(tmpl []byte, id string) []byte { return []byte(strings.Replace(string(tmpl), "%s", id, 1)) }
	for _, c := range []struct{ id, phase string }{{"done", fleet.PhaseDraining}, {"mid", fleet.PhaseCandidates}, {"newer", fleet.PhaseCandidates}} {
		cur := of(specB, c.id)
		if c.id == "newer" {
			cur = of(specC, c.id)
		}
		if _, err := st.PutDeployment(ctx, store.Deployment{ID: c.id, Spec: cur}, false, 0); err != nil {
			t.Fatal(err)
		}
		a, b := of(specA, c.id), of(specB, c.id)
		if _, err := st.PutRollout(ctx, store.Rollout{
			Deployment: c.id, OperationID: "op", Status: "running", Phase: c.phase,
			SourceRevision: revisionOf(a), TargetRevision: revisionOf(b), SourceSpec: a,
			FallbackRevision: revisionOf(a), FallbackSpec: a,
		}, Keep); err != nil {
			t.Fatal(err)
		}
	}
	m := New(st, nil)
	if err := m.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]struct{ status, spec string }{
		"done":  {"succeeded", string(of(specB, "done"))},
		"mid":   {"failed", string(of(specA, "mid"))},
		"newer": {"failed", string(of(specC, "newer"))},
	} {
		op, err := m.Get(ctx, id, "op")
		if err != nil {
			t.Fatal(err)
		}
		d, _ := st.Deployment(ctx, id)
		if op.Status != want.status || string(d.Spec) != want.spec {
			t.Errorf("%s: status %s, spec %s; want %s, %s", id, op.Status, d.Spec, want.status, want.spec)
		}
		if op.Status == "failed" && (op.Error == nil || !strings.Contains(*op.Error, "berth stopped")) {
			t.Errorf("%s: error %v", id, op.Error)
		}
		if id == "mid" {
			var s Settlement
			json.Unmarshal(op.FailureSettlement, &s)
			if s.SpecRevertedTo != op.SourceRevision {
				t.Errorf("mid: settlement %s", op.FailureSettlement)
			}
		}
	}
	if run, _ := st.RunningRollouts(ctx); len(run) != 0 {
		t.Errorf("%d operations still running", len(run))
	}
}

// TestValidOperationID names the field it refuses.
func TestValidOperationID(t *testing.T) {
	for id, ok := range map[string]bool{"op-1": true, "a.b:c_d": true, "": false, "has space": false, strings.Repeat("x", 129): false} {
		err := ValidOperationID(id)
		if (err == nil) != ok || err != nil && !strings.HasPrefix(err.Error(), "operation_id") {
			t.Errorf("%q: %v", id, err)
		}
	}
}
