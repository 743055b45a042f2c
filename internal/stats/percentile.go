// Package stats holds the one percentile definition of llmroute's tests,
// tools and recorded results.
package stats

import (
	"math"
	"sort"
)

// Percentile returns the q-quantile (q in [0, 1]) of sorted (ascending) by
// linear interpolation between the closest ranks: the value at position
// q*(n-1), counted from 0, interpolated between its neighbours (Hyndman and
// Fan's type 7, the default of NumPy and R). It is the simulator's
// definition (sim.Percentile with p = 100q), which the end-to-end
// experiments, the real-engine runs and the proxy-cost bench share, so
// their numbers can be set side by side.
//
// It returns NaN when sorted is empty; q outside [0, 1] is clamped.
func Percentile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	pos := q * float64(n-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, n-1)
	fr := pos - float64(lo)
	return sorted[lo]*(1-fr) + sorted[hi]*fr
}

// Median returns the median of xs (in any order; xs is not changed):
// Percentile at 0.5 of a sorted copy, so the mean of the two middle values
// of an even count. NaN when xs is empty.
func Median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return Percentile(s, .5)
}
