package client

// SetMaxResponseBytes lowers the response size limit for a test and returns
// a function that restores it.
func SetMaxResponseBytes(n int64) (restore func()) {
	old := maxResponseBytes
	maxResponseBytes = n
	return func() { maxResponseBytes = old }
}
