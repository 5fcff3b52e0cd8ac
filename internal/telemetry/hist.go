package telemetry

import (
	"encoding/binary"
	"math"
)

// The latency histogram: log-scale buckets from histBase ms growing by
// histGrowth, so a percentile read from it is within about 10% of the
// true value; the last bucket holds everything slower.
const (
	histBase    = 0.05 // ms: the first bucket's upper bound
	histGrowth  = 1.2
	histBuckets = 80 // the last upper bound is ~107 s
)

var logGrowth = math.Log(histGrowth)

type hist [histBuckets]uint32

func histIndex(ms float64) int {
	if ms <= histBase {
		return 0
	}
	i := int(math.Ceil(math.Log(ms/histBase) / logGrowth))
	return min(i, histBuckets-1)
}

func (h *hist) add(ms float64) { h[histIndex(ms)]++ }

func (h *hist) merge(o *hist) {
	for i, n := range o {
		h[i] += n
	}
}

// quantile is the latency at q (0..1): the geometric middle of the bucket
// the q-th observation falls in. ok is false for an empty histogram.
func (h *hist) quantile(q float64) (float64, bool) {
	var total uint64
	for _, n := range h {
		total += uint64(n)
	}
	if total == 0 {
		return 0, false
	}
	rank := uint64(math.Ceil(q * float64(total)))
	rank = max(rank, 1)
	var seen uint64
	for i, n := range h {
		seen += uint64(n)
		if seen >= rank {
			hi := histBase * math.Pow(histGrowth, float64(i))
			if i == 0 {
				return hi / 2, true
			}
			return hi / math.Sqrt(histGrowth), true
		}
	}
	return histBase * math.Pow(histGrowth, histBuckets-1), true
}

// encode writes the non-empty buckets as uvarint (index, count) pairs.
func (h *hist) encode() []byte {
	var b []byte
	for i, n := range h {
		if n > 0 {
			b = binary.AppendUvarint(b, uint64(i))
			b = binary.AppendUvarint(b, uint64(n))
		}
	}
	return b
}

// decodeAdd adds an encoded histogram to h, ignoring what does not parse.
func (h *hist) decodeAdd(b []byte) {
	for len(b) > 0 {
		i, n1 := binary.Uvarint(b)
		if n1 <= 0 {
			return
		}
		c, n2 := binary.Uvarint(b[n1:])
		if n2 <= 0 {
			return
		}
		b = b[n1+n2:]
		if i < histBuckets {
			h[i] += uint32(c)
		}
	}
}
