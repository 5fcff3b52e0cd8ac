//go:build !unix

package agent

// openNonblock is zero where FIFOs cannot block an open.
const openNonblock = 0
