package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// home returns the replica with the highest Rendezvous score of key.
func home(key uint64, rs []Replica) int {
	best, bestScore := -1, uint64(0)
	for i := range rs {
		if sc := Rendezvous(key, rs[i].Addr); best < 0 || sc > bestScore {
			best, bestScore = i, sc
		}
	}
	return best
}

// TestRendezvousRemap checks that when one of 8 replicas leaves only the
// keys homed on it move, about 1/8 of them, and that homes are balanced.
func TestRendezvousRemap(t *testing.T) {
	const n, keys, leaver = 8, 10_000, 5
	all := replicas(n)
	rest := append(append([]Replica(nil), all[:leaver]...), all[leaver+1:]...)
	moved := 0
	perHome := make([]int, n)
	for k := uint64(1); k <= keys; k++ {
		key := mix64(k)
		before := home(key, all)
		perHome[before]++
		after := home(key, rest)
		if after >= leaver {
			after++ // back to all's numbering
		}
		if before != after {
			moved++
			require.Equal(t, leaver, before, "key %d moved off a replica that stayed", k)
		}
	}
	frac := float64(moved) / keys
	t.Logf("moved %.3f of keys; homes %v", frac, perHome)
	assert.GreaterOrEqual(t, frac, 0.08)
	assert.LessOrEqual(t, frac, 0.17)
	for i, c := range perHome {
		assert.InDelta(t, keys/n, c, keys/n/4, "replica %d", i)
	}
}

// TestRendezvousPrefixAffinityAgrees checks that prefix_affinity's pick is
// the rendezvous home, and that the home is independent of replica order,
// so router instances that list replicas differently still agree.
func TestRendezvousOrderIndependent(t *testing.T) {
	rs := replicas(8)
	rev := make([]Replica, len(rs))
	for i := range rs {
		rev[len(rs)-1-i] = rs[i]
	}
	s := mustStrategy(t, "prefix_affinity", Options{})
	for k := uint64(1); k < 500; k++ {
		h := home(k, rs)
		assert.Equal(t, h, s.Pick(Keys{Leading: k}, rs))
		assert.Equal(t, rs[h].Addr, rev[home(k, rev)].Addr)
	}
}

func TestRendezvousDistinct(t *testing.T) {
	assert.NotEqual(t, Rendezvous(1, "a"), Rendezvous(2, "a"))
	assert.NotEqual(t, Rendezvous(1, "a"), Rendezvous(1, "b"))
	assert.Equal(t, Rendezvous(1, "a"), Rendezvous(1, "a"))
}
