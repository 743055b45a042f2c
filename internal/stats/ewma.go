package stats

// EWMA is an exponentially weighted moving average that starts at its
// first sample: the one rule of the learned estimates (admission's output
// estimate, slot_hold's slot span and prefill rate).
type EWMA struct {
	v float64
	n int
}

// Add moves the average the fraction gain of the way to x (to x itself
// for the first sample).
func (e *EWMA) Add(x, gain float64) {
	if e.n == 0 {
		e.v = x
	} else {
		e.v += (x - e.v) * gain
	}
	e.n++
}

// Value is the average, 0 before any sample.
func (e *EWMA) Value() float64 { return e.v }

// N counts the samples.
func (e *EWMA) N() int { return e.n }
