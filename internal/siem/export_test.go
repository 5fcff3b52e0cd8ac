package siem

// SketchBit is the sketch bit s sets in e's sketches, so tests can pick
// values that do not collide.
func SketchBit(e *Engine, s string) int { return int(e.st.hash(s) % 64) }

// Batch is one of Run's batches: analysis, new alerts written at once,
// folds at most every foldStoreEvery.
func Batch(e *Engine) { e.flush(false) }
