package proxy

// WatchAfter exposes watchAfter to the tests, which set it (before starting
// any server) to watch every request for a client hanging up.
var WatchAfter = &watchAfter

// Parked reports how many of the front end's connections are parked.
func (s *H1Server) Parked() int { return s.park.parkedCount() }

// CPUTime is the process's CPU time so far, in ns, for the benchmarks'
// cpu-ns/op.
var CPUTime = cpuTime
