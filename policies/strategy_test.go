package policies

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// replicas returns n idle replicas with unknown engine figures and empty
// indexes.
func replicas(n int) []Replica {
	rs := make([]Replica, n)
	for i := range rs {
		rs[i] = Replica{
			Addr:          fmt.Sprintf("10.0.0.%d:8000", i+1),
			EngineWaiting: -1,
			EngineRunning: -1,
			KVUsage:       -1,
			Index:         NewIndex(4096),
		}
	}
	return rs
}

func mustStrategy(t testing.TB, name string, opts Options) Strategy {
	t.Helper()
	s, err := NewStrategy(name, opts)
	require.NoError(t, err)
	require.Equal(t, name, s.Name())
	return s
}

// strategyNames returns StrategyNames once it holds at least the four
// strategies, so that a loop over it cannot pass by running no strategy.
func strategyNames(t testing.TB) []string {
	t.Helper()
	require.Subset(t, StrategyNames, []string{"round_robin", "prefix_affinity", "least_load", "prefix_load"})
	return StrategyNames
}

func TestNewStrategy(t *testing.T) {
	for _, name := range strategyNames(t) {
		mustStrategy(t, name, Options{})
	}
	_, err := NewStrategy("random", Options{})
	require.Error(t, err)
	for _, name := range StrategyNames {
		assert.Contains(t, err.Error(), name)
	}
	_, err = NewStrategy("prefix_load", Options{BalanceFactor: 0.9})
	assert.Error(t, err)
	_, err = NewStrategy("prefix_load", Options{ColdBalanceFactor: 0.5})
	assert.Error(t, err)
	_, err = NewStrategy("prefix_load", Options{Peers: PeersSome + 1})
	assert.Error(t, err)
	_, err = NewStrategy("prefix_load", Options{ColdSlack: math.NaN()})
	assert.Error(t, err)
	_, err = NewStrategy("prefix_load", Options{DetourSlack: math.Inf(1)})
	assert.Error(t, err)
}

func TestOptionsDefaults(t *testing.T) {
	tests := []struct {
		in, want Options
	}{
		{Options{}, Options{BalanceFactor: DefaultBalanceFactor, LoadSlack: 2, MinMatchBlocks: 1, ColdBalanceFactor: DefaultColdBalanceFactor, ColdSlack: DefaultColdSlack, DetourSlack: DefaultDetourSlack, UniqueRun: DefaultUniqueRun}},
		{Options{Seed: 7, BalanceFactor: 2, LoadSlack: 5, MinMatchBlocks: 4, ColdBalanceFactor: 1.25, Peers: PeersSome, ColdSlack: 1.5, DetourSlack: 4, UniqueRun: 9},
			Options{Seed: 7, BalanceFactor: 2, LoadSlack: 5, MinMatchBlocks: 4, ColdBalanceFactor: 1.25, Peers: PeersSome, ColdSlack: 1.5, DetourSlack: 4, UniqueRun: 9}},
		{Options{LoadSlack: -1, MinMatchBlocks: -3, ColdSlack: -1, DetourSlack: -1, UniqueRun: -1}, Options{BalanceFactor: DefaultBalanceFactor, LoadSlack: 0, MinMatchBlocks: 1, ColdBalanceFactor: DefaultColdBalanceFactor, UniqueRun: -1}},
		{Options{}, Options{BalanceFactor: DefaultBalanceFactor, LoadSlack: 2, MinMatchBlocks: 1, ColdBalanceFactor: DefaultColdBalanceFactor, ColdSlack: DefaultColdSlack, DetourSlack: DefaultDetourSlack, UniqueRun: DefaultUniqueRun}},
		// An unset cold factor is never tighter than the warm one.
		{Options{BalanceFactor: 3}, Options{BalanceFactor: 3, LoadSlack: 2, MinMatchBlocks: 1, ColdBalanceFactor: 3, ColdSlack: DefaultColdSlack, DetourSlack: DefaultDetourSlack, UniqueRun: DefaultUniqueRun}},
	}
	for _, tt := range tests {
		got, err := tt.in.WithDefaults()
		require.NoError(t, err)
		assert.Equal(t, tt.want, got)
	}
}

// TestStrategiesNeverPickUnfree runs every strategy over replicas where
// only some are Free and checks the answers.
func TestStrategiesNeverPickUnfree(t *testing.T) {
	keys := Keys{Leading: 42, Blocks: []uint64{1, 2, 3}}
	tests := []struct {
		name  string
		setup func(rs []Replica)
		want  []int // the allowed answers
	}{
		{"no replicas", func([]Replica) {}, nil},
		{"all unavailable", func(rs []Replica) {
			for i := range rs {
				rs[i].Unavailable = true
			}
		}, []int{-1}},
		{"all full", func(rs []Replica) {
			for i := range rs {
				rs[i].Cap, rs[i].InFlight = 2, 2
			}
		}, []int{-1}},
		{"only 2 free", func(rs []Replica) {
			for i := range rs {
				rs[i].Unavailable = i != 2
			}
			rs[2].Index.(*Index).Insert(keys.Blocks)
		}, []int{2}},
		{"only 3 free, others full or out", func(rs []Replica) {
			for i := range rs {
				if i%2 == 0 {
					rs[i].Unavailable = true
				} else if i != 3 {
					rs[i].Cap, rs[i].InFlight = 1, 1
				}
				rs[i].Index.(*Index).Insert(keys.Blocks)
			}
		}, []int{3}},
	}
	for _, name := range strategyNames(t) {
		for _, tt := range tests {
			t.Run(name+"/"+tt.name, func(t *testing.T) {
				s := mustStrategy(t, name, Options{})
				rs := replicas(5)
				tt.setup(rs)
				if tt.want == nil {
					assert.Equal(t, -1, s.Pick(keys, nil))
					return
				}
				for i := 0; i < 20; i++ {
					assert.Contains(t, tt.want, s.Pick(keys, rs))
					assert.Contains(t, tt.want, s.Pick(Keys{}, rs))
				}
			})
		}
	}
}

// TestPickDoesNotAllocate covers every strategy's common path.
func TestPickDoesNotAllocate(t *testing.T) {
	rs := replicas(16)
	keys := Keys{Leading: 42, Blocks: []uint64{1, 2, 3, 4}}
	rs[3].Index.(*Index).Insert(keys.Blocks)
	for _, name := range strategyNames(t) {
		s := mustStrategy(t, name, Options{})
		assert.Zero(t, testing.AllocsPerRun(100, func() { s.Pick(keys, rs) }), name)
		assert.Zero(t, testing.AllocsPerRun(100, func() { s.Pick(Keys{}, rs) }), name)
	}
	assert.Zero(t, testing.AllocsPerRun(100, func() { Rendezvous(42, rs[0].Addr) }))
}

// TestStrategiesConcurrent runs every strategy from several goroutines
// while the indexes change; run it with -race.
func TestStrategiesConcurrent(t *testing.T) {
	rs := replicas(8)
	keys := Keys{Leading: 5, Blocks: []uint64{1, 2, 3}}
	for _, name := range strategyNames(t) {
		s := mustStrategy(t, name, Options{})
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 300; i++ {
					p := s.Pick(keys, rs)
					assert.GreaterOrEqual(t, p, 0)
					rs[p].Index.(*Index).Insert(keys.Blocks)
					if i%100 == 0 {
						rs[p].Index.(*Index).Purge()
					}
				}
			}()
		}
		wg.Wait()
	}
}
