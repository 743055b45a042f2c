package policies

import (
	"testing"
	"time"
)

// TestHoldWait tables the slot hold's decision: it waits only when the
// slot is expected before the request's own uncached prefill would end,
// for at most that prefill and never past the limit; before anything is
// learned it waits up to the limit.
func TestHoldWait(t *testing.T) {
	var learned SlotEstimate
	// Requests hold their slot 100 ms; a miss takes 1 ms per byte.
	learned.Observe(100*time.Millisecond, 500*time.Millisecond, 500)
	const ms = time.Millisecond
	tests := []struct {
		name                    string
		e                       SlotEstimate
		ran                     time.Duration
		running, waiting, bytes int
		limit                   time.Duration
		want                    time.Duration
		wantOK                  bool
	}{
		{"nothing learned: the limit", SlotEstimate{}, 0, 1, 0, 1000, 2000 * ms, 2000 * ms, true},
		{"no prompt size: the limit", learned, 0, 1, 0, 0, 2000 * ms, 2000 * ms, true},
		{"prefill longer than the rest of the span", learned, 0, 1, 0, 1000, 2000 * ms, 1000 * ms, true},
		{"prefill shorter than the span", learned, 0, 1, 0, 50, 2000 * ms, 0, false},
		{"the span nearly over", learned, 80 * ms, 1, 0, 50, 2000 * ms, 50 * ms, true},
		{"past its span: due now", learned, 300 * ms, 1, 0, 50, 2000 * ms, 50 * ms, true},
		{"waiters ahead", learned, 0, 1, 9, 1000, 2000 * ms, 0, false},
		{"waiters ahead, two running", learned, 0, 2, 9, 1000, 2000 * ms, 1000 * ms, true},
		{"bounded by the limit", learned, 0, 1, 0, 100000, 2000 * ms, 2000 * ms, true},
	}
	waited := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.e.HoldWait(tt.ran, tt.running, tt.waiting, tt.bytes, tt.limit)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("HoldWait = %v, %v; want %v, %v", got, ok, tt.want, tt.wantOK)
			}
			if ok {
				waited++
			}
		})
	}
	if waited != 7 {
		t.Fatalf("%d cases waited, want 7", waited)
	}
}

// TestSlotEstimateObserve: the averages start at the first sample, move a
// fifth of the way to each next one, and ignore what says nothing.
func TestSlotEstimateObserve(t *testing.T) {
	var e SlotEstimate
	if e.Span() != 0 || e.PrefillPerByte() != 0 {
		t.Fatal("not zero before any sample")
	}
	e.Observe(100*time.Millisecond, 0, 0)
	e.Observe(600*time.Millisecond, 0, 0)
	if got := e.Span(); got != 200*time.Millisecond {
		t.Fatalf("span %v, want 200ms", got)
	}
	e.Observe(0, 200*time.Millisecond, 100)
	e.Observe(0, time.Second, 0) // mostly cached: no prefill sample
	if got := e.PrefillPerByte(); got != 2*time.Millisecond {
		t.Fatalf("prefill %v per byte, want 2ms", got)
	}
}
