package siem

// SketchBit is the sketch bit s sets in e's sketches, so tests can pick
// values that do not collide.
func SketchBit(e *Engine, s string) int { return int(e.st.hash(s) % 64) }
