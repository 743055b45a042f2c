package policies

import "sync/atomic"

// roundRobin takes the Free replicas in turn. It ignores keys and load; it
// is the baseline the other strategies are measured against.
type roundRobin struct {
	next atomic.Uint64
}

// Name returns "round_robin".
func (*roundRobin) Name() string { return "round_robin" }

// Pick returns the first Free replica at or after the counter's position,
// or -1 when none is Free.
func (s *roundRobin) Pick(_ Keys, replicas []Replica) int {
	n := len(replicas)
	if n == 0 {
		return -1
	}
	start := int((s.next.Add(1) - 1) % uint64(n))
	for i := 0; i < n; i++ {
		j := (start + i) % n
		if replicas[j].Free() {
			return j
		}
	}
	return -1
}
