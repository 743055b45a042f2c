package policies

import (
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
)

// ranked returns replica indexes by decreasing Rendezvous score of key.
func ranked(key uint64, rs []Replica) []int {
	idx := make([]int, len(rs))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool {
		return Rendezvous(key, rs[idx[a]].Addr) > Rendezvous(key, rs[idx[b]].Addr)
	})
	return idx
}

func TestPrefixAffinity(t *testing.T) {
	const key = 12345
	rank := ranked(key, replicas(6))
	tests := []struct {
		name  string
		setup func(rs []Replica)
		want  int
	}{
		{"home", func([]Replica) {}, rank[0]},
		{"home busy still home", func(rs []Replica) { rs[rank[0]].InFlight = 50 }, rank[0]},
		{"home full: next ranked", func(rs []Replica) { rs[rank[0]].Cap, rs[rank[0]].InFlight = 4, 4 }, rank[1]},
		{"home and second out: third", func(rs []Replica) {
			rs[rank[0]].Unavailable = true
			rs[rank[1]].Cap, rs[rank[1]].InFlight = 1, 1
		}, rank[2]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustStrategy(t, "prefix_affinity", Options{})
			rs := replicas(6)
			tt.setup(rs)
			for i := 0; i < 10; i++ {
				assert.Equal(t, tt.want, s.Pick(Keys{Leading: key}, rs))
			}
		})
	}
}

func TestPrefixAffinityNoKeyIsLeastLoad(t *testing.T) {
	s := mustStrategy(t, "prefix_affinity", Options{})
	rs := replicas(4)
	rs[0].InFlight, rs[1].InFlight, rs[2].InFlight, rs[3].InFlight = 2, 1, 0, 0
	counts := map[int]int{}
	for i := 0; i < 400; i++ {
		counts[s.Pick(Keys{}, rs)]++
	}
	assert.Equal(t, 400, counts[2]+counts[3])
	assert.Greater(t, counts[2], 100)
	assert.Greater(t, counts[3], 100)
}
