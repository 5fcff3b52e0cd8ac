package proxy

// WatchAfter exposes watchAfter to the tests, which set it (before starting
// any server) to watch every request for a client hanging up.
var WatchAfter = &watchAfter
