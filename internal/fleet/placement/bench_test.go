package placement_test

import (
	"fmt"
	"testing"

	"github.com/berth-dev/berth/internal/fleet/placement"
)

// BenchmarkPlace1000 places 1,000 replicas (100 deployments × 10) from
// scratch over 20 and over 100 hosts, with images on some hosts; "kept"
// places them again with every unit already where it runs.
func BenchmarkPlace1000(b *testing.B) {
	var reqs []placement.Request
	for d := range 100 {
		for r := range 10 {
			reqs = append(reqs, placement.Request{
				Unit: fmt.Sprintf("deployment/d%03d/%d", d, r), Group: fmt.Sprintf("d%03d", d),
				Driver: "process", Image: fmt.Sprintf("img%d", d%10), CPUMillis: 100, MemoryBytes: 128 << 20,
			})
		}
	}
	for _, n := range []int{20, 100} {
		var hs []placement.Host
		for i := range n {
			hs = append(hs, placement.Host{
				ID: fmt.Sprintf("h%03d", i), Drivers: []string{"process", "firecracker"}, State: placement.Active,
				CPUMillis: 64000, MemoryBytes: 256 << 30, MaxActive: 200, ReservedHeadroom: 2,
				Images: []string{fmt.Sprintf("img%d", i%10)},
			})
		}
		as, un := placement.Place(hs, reqs, nil)
		if len(as) != 1000 || len(un) != 0 {
			b.Fatalf("%d hosts: %d placed, %d unplaced", n, len(as), len(un))
		}
		cur := map[string]string{}
		for _, a := range as {
			cur[a.Unit] = a.Host
		}
		b.Run(fmt.Sprintf("hosts=%d", n), func(b *testing.B) {
			for b.Loop() {
				placement.Place(hs, reqs, nil)
			}
		})
		b.Run(fmt.Sprintf("hosts=%d/kept", n), func(b *testing.B) {
			for b.Loop() {
				placement.Place(hs, reqs, cur)
			}
		})
	}
}
