package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLeastLoad(t *testing.T) {
	tests := []struct {
		name  string
		setup func(rs []Replica)
		want  []int // allowed answers
	}{
		{"fewest in flight", func(rs []Replica) {
			rs[0].InFlight, rs[1].InFlight, rs[2].InFlight, rs[3].InFlight = 3, 1, 2, 4
		}, []int{1}},
		{"engine queue counts", func(rs []Replica) {
			rs[0].InFlight, rs[1].InFlight, rs[2].InFlight, rs[3].InFlight = 3, 1, 2, 4
			rs[1].EngineWaiting = 5
		}, []int{2}},
		{"unknown engine queue is not idle", func(rs []Replica) {
			rs[0].InFlight, rs[1].InFlight, rs[2].InFlight, rs[3].InFlight = 1, 0, 1, 1
			rs[1].EngineWaiting = -1
		}, []int{1}},
		{"skips unavailable least loaded", func(rs []Replica) {
			rs[0].InFlight, rs[1].InFlight, rs[2].InFlight, rs[3].InFlight = 3, 0, 2, 4
			rs[1].Unavailable = true
		}, []int{2}},
		{"skips full least loaded", func(rs []Replica) {
			rs[0].InFlight, rs[1].InFlight, rs[2].InFlight, rs[3].InFlight = 3, 1, 2, 4
			rs[1].Cap = 1
		}, []int{2}},
		{"ties", func(rs []Replica) {
			rs[0].InFlight, rs[1].InFlight, rs[2].InFlight, rs[3].InFlight = 1, 0, 1, 0
		}, []int{1, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustStrategy(t, "least_load", Options{})
			rs := replicas(4)
			tt.setup(rs)
			for i := 0; i < 50; i++ {
				assert.Contains(t, tt.want, s.Pick(Keys{}, rs))
			}
		})
	}
}

// TestLeastLoadTieSpread checks that ties are broken evenly, never toward
// the first replica.
func TestLeastLoadTieSpread(t *testing.T) {
	s := mustStrategy(t, "least_load", Options{Seed: 1})
	rs := replicas(5)
	rs[2].InFlight = 1 // not tied
	counts := map[int]int{}
	for i := 0; i < 1000; i++ {
		counts[s.Pick(Keys{}, rs)]++
	}
	assert.Zero(t, counts[2])
	for _, i := range []int{0, 1, 3, 4} {
		assert.InDelta(t, 250, counts[i], 60, "replica %d: %v", i, counts)
	}
}

func TestLeastLoadDeterministic(t *testing.T) {
	seq := func(seed uint64) []int {
		s := mustStrategy(t, "least_load", Options{Seed: seed})
		rs := replicas(8)
		var out []int
		for i := 0; i < 100; i++ {
			out = append(out, s.Pick(Keys{}, rs))
		}
		return out
	}
	assert.Equal(t, seq(7), seq(7))
	assert.NotEqual(t, seq(7), seq(8))
}
