package stats

import "testing"

// TestEWMA: the first sample is the average; each next one moves it gain
// of the way; N counts them.
func TestEWMA(t *testing.T) {
	var e EWMA
	if e.Value() != 0 || e.N() != 0 {
		t.Fatal("not zero before any sample")
	}
	e.Add(10, 0.25)
	if e.Value() != 10 {
		t.Fatalf("first sample: %v", e.Value())
	}
	e.Add(30, 0.25)
	if e.Value() != 15 || e.N() != 2 {
		t.Fatalf("after 30 at gain 1/4: %v (n %d), want 15", e.Value(), e.N())
	}
}
