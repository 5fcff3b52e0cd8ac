package apitype_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/berth-dev/berth/apitype"
	"github.com/berth-dev/berth/internal/contracttest"
)

// TestRateLimitIsBerthsOwn: the contract declares no RateLimit, so the
// type stays out of the contract registry (TestContract would refuse it);
// should the contract ever declare one, this names the clash.
func TestRateLimitIsBerthsOwn(t *testing.T) {
	if c := contracttest.MustLoad(t); slices.Contains(c.Names, "RateLimit") {
		t.Fatal("the contract now declares RateLimit: reconcile apitype.RateLimit with it and register it in contract_test.go")
	}
}

func TestRateLimitJSON(t *testing.T) {
	var rl apitype.RateLimit
	if err := json.Unmarshal([]byte(`{"concurrent_per_client":4}`), &rl); err != nil || rl != (apitype.RateLimit{ConcurrentPerClient: 4}) {
		t.Fatalf("decode: %+v, %v", rl, err)
	}
	out, _ := json.Marshal(apitype.RateLimit{RequestsPerSec: 2.5, Burst: 3, MaxClients: 10})
	if want := `{"requests_per_sec":2.5,"burst":3,"concurrent_per_client":0,"max_clients":10}`; string(out) != want {
		t.Errorf("encode: %s, want %s", out, want)
	}
}
