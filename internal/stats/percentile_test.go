package stats

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	five := []float64{1, 2, 3, 4, 5}
	for _, tc := range []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"min", five, 0, 1},
		{"max", five, 1, 5},
		{"median odd", five, .5, 3},
		{"quartile on a rank", five, .25, 2},
		{"between ranks", five, .1, 1.4},
		{"p90 between ranks", five, .9, 4.6},
		{"median even", []float64{10, 20, 30, 40}, .5, 25},
		{"one sample", []float64{7}, .99, 7},
		// Nearest rank would give 99 here (the 99th of 100); linear
		// interpolation between ranks 98 and 99 (from 0) gives 99.01.
		{"p99 of 1..100", seq(100), .99, 99.01},
		{"clamped below", five, -1, 1},
		{"clamped above", five, 2, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percentile(tc.xs, tc.q); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("Percentile(%v, %v) = %v, want %v", tc.xs, tc.q, got, tc.want)
			}
		})
	}
	if got := Percentile(nil, .5); !math.IsNaN(got) {
		t.Fatalf("Percentile of nothing = %v, want NaN", got)
	}
}

func seq(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	return xs
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{5}, 5},
	} {
		in := append([]float64(nil), tc.xs...)
		if got := Median(tc.xs); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
		for i := range in {
			if in[i] != tc.xs[i] {
				t.Fatalf("Median reordered its input: %v", tc.xs)
			}
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Fatal("Median of nothing is not NaN")
	}
}
