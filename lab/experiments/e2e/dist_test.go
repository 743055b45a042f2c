package e2e

import (
	"math"
	"testing"

	"github.com/llmroute/caddy-llmroute/internal/stats"
	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
)

// TestPercentileMatchesSimulator keeps the end-to-end figures (dist, with
// internal/stats) comparable with the simulator's (sim.Percentile): the
// record sets them side by side.
func TestPercentileMatchesSimulator(t *testing.T) {
	for _, xs := range [][]float64{{4}, {1, 2}, {1, 2, 3, 4, 5}, {0.3, 1.7, 2.2, 9, 12.5, 40, 41, 100}} {
		for _, p := range []float64{0, 1, 10, 25, 50, 90, 99, 100} {
			if got, want := stats.Percentile(xs, p/100), sim.Percentile(xs, p); math.Abs(got-want) > 1e-12 {
				t.Fatalf("p%v of %v: stats %v, sim %v", p, xs, got, want)
			}
		}
	}
	d := dist([]float64{5, 1, 4, 2, 3})
	if d.N != 5 || d.P50 != 3 || d.Max != 5 || d.Mean != 3 || math.Abs(d.P90-4.6) > 1e-12 {
		t.Fatalf("dist = %+v", d)
	}
}
