//go:build race

package proxy_test

// raceEnabled says the race detector is on: its sync.Pool drops items at
// random, so what comes from a pool may be allocated anew.
const raceEnabled = true
