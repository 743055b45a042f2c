package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRoundRobin(t *testing.T) {
	tests := []struct {
		name  string
		setup func(rs []Replica)
		want  []int
	}{
		{"cycles", func([]Replica) {}, []int{0, 1, 2, 3, 0, 1, 2, 3}},
		{"skips unavailable", func(rs []Replica) { rs[1].Unavailable = true }, []int{0, 2, 2, 3, 0, 2, 2, 3}},
		{"skips full", func(rs []Replica) { rs[3].Cap, rs[3].InFlight = 1, 1 }, []int{0, 1, 2, 0, 0, 1, 2, 0}},
		{"ignores load", func(rs []Replica) { rs[0].InFlight = 100 }, []int{0, 1, 2, 3, 0, 1, 2, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustStrategy(t, "round_robin", Options{})
			rs := replicas(4)
			tt.setup(rs)
			var got []int
			for range tt.want {
				got = append(got, s.Pick(Keys{Leading: 1}, rs))
			}
			assert.Equal(t, tt.want, got)
		})
	}
}
