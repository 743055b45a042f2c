package policies

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// surveyed returns the candidates of keys over rs as prefix_load surveys
// them before its rules run.
func surveyed(t *testing.T, opts Options, keys Keys, rs []Replica) *candidates {
	t.Helper()
	o, err := opts.WithDefaults()
	require.NoError(t, err)
	s := newPrefixLoad(o)
	c := &candidates{s: s, mem: s.mem.Load(), keys: keys, replicas: rs}
	c.bound = LoadBound(rs, o.BalanceFactor, o.LoadSlack)
	c.cold = c.bound.Widen(o.ColdBalanceFactor, o.LoadSlack)
	c.survey()
	return c
}

// ruleKeys is a request of 4 blocks whose first is the leading run.
var ruleKeys = Keys{Leading: 777, Blocks: []uint64{11, 12, 13, 14}, LeadingBlocks: 1, Bytes: 512, BlockBytes: 128}

// ruleCase is one situation a rule is asked about: the replicas set up,
// and what the rule says (ok, and the replica as a rank of the home key).
type ruleCase struct {
	name  string
	opts  Options
	setup func(rs []Replica, rank []int, c func() *candidates)
	ok    bool
	want  int // rank index of the replica decided, when ok
}

// runRule runs the cases on 6 replicas against rule.
func runRule(t *testing.T, cases []ruleCase, rule func(c *candidates) (int, int, bool)) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rs := replicas(6)
			rank := ranked(HomeKey(ruleKeys), rs)
			var c *candidates
			get := func() *candidates {
				if c == nil {
					c = surveyed(t, tc.opts, ruleKeys, rs)
				}
				return c
			}
			tc.setup(rs, rank, get)
			i, _, ok := rule(get())
			require.Equal(t, tc.ok, ok)
			if ok {
				assert.Equal(t, rank[tc.want], i)
			}
		})
	}
}

func insert(r *Replica, blocks []uint64) { r.Index.(*Index).Insert(blocks) }

// TestFollowHistory: a match past the leading run decides, the longest
// wins; a leading-run match or none passes.
func TestFollowHistory(t *testing.T) {
	runRule(t, []ruleCase{
		{"nothing believed: passes", Options{}, func([]Replica, []int, func() *candidates) {}, false, 0},
		{"only the leading run: passes", Options{}, func(rs []Replica, rank []int, _ func() *candidates) {
			insert(&rs[rank[2]], ruleKeys.Blocks[:1])
		}, false, 0},
		{"its history: where it is", Options{}, func(rs []Replica, rank []int, _ func() *candidates) {
			insert(&rs[rank[3]], ruleKeys.Blocks[:3])
		}, true, 3},
		{"the longest history wins", Options{}, func(rs []Replica, rank []int, _ func() *candidates) {
			insert(&rs[rank[1]], ruleKeys.Blocks[:2])
			insert(&rs[rank[4]], ruleKeys.Blocks)
		}, true, 4},
	}, (*candidates).followHistory)
}

// TestSpillHot: a prefix held only past the bound spills to the top rank;
// one held within it, or nowhere, passes.
func TestSpillHot(t *testing.T) {
	runRule(t, []ruleCase{
		{"held past the bound: the top rank", Options{}, func(rs []Replica, rank []int, _ func() *candidates) {
			insert(&rs[rank[3]], ruleKeys.Blocks)
			rs[rank[3]].InFlight = 10 // bound ceil(1.5*11/6)+2 = 5
		}, true, 0},
		{"held within the bound: passes", Options{}, func(rs []Replica, rank []int, _ func() *candidates) {
			insert(&rs[rank[3]], ruleKeys.Blocks)
		}, false, 0},
		{"held nowhere: passes", Options{}, func([]Replica, []int, func() *candidates) {}, false, 0},
	}, (*candidates).spillHot)
}

// TestFollowLeading: a leading-run match goes to the recorded home this
// router may follow, to the rendezvous home where this router placed it
// by load with peers, else stays where it matches; without a match it
// passes.
func TestFollowLeading(t *testing.T) {
	alone := Options{Peers: PeersNone}
	runRule(t, []ruleCase{
		{"no match: passes", alone, func([]Replica, []int, func() *candidates) {}, false, 0},
		{"alone, its recorded home", alone, func(rs []Replica, rank []int, c func() *candidates) {
			insert(&rs[rank[2]], ruleKeys.Blocks[:1])
			c().mem.own.Claim(HomeKey(ruleKeys), rs[rank[4]].Addr)
		}, true, 4},
		{"alone, a home past the bound: where it matches", alone, func(rs []Replica, rank []int, c func() *candidates) {
			insert(&rs[rank[2]], ruleKeys.Blocks[:1])
			rs[rank[4]].InFlight = 10
			c().mem.own.Claim(HomeKey(ruleKeys), rs[rank[4]].Addr)
		}, true, 2},
		{"with peers, placed here by load: the rendezvous home", Options{Peers: PeersSome}, func(rs []Replica, rank []int, c func() *candidates) {
			insert(&rs[rank[2]], ruleKeys.Blocks[:1])
			c().mem.provisional.Learn(HomeKey(ruleKeys), rs[rank[2]].Addr)
		}, true, 0},
		{"with peers, placed elsewhere: where it matches", Options{Peers: PeersSome}, func(rs []Replica, rank []int, _ func() *candidates) {
			insert(&rs[rank[2]], ruleKeys.Blocks[:1])
		}, true, 2},
	}, (*candidates).followLeading)
}

// TestFollowLeadingSharedRun: a match of only what two replicas hold in
// common, with no recorded home, passes for a router that follows its
// homes (a new prefix past the shared run, placed by load), goes home
// when it has one, and with peers and no Directory goes by the rank of
// its own opening within the cold bound: among the replicas that hold the
// shared run while fewer than half do, among all once more do.
func TestFollowLeadingSharedRun(t *testing.T) {
	held := func(rs []Replica) (a, b int) {
		insert(&rs[1], ruleKeys.Blocks[:2])
		insert(&rs[3], ruleKeys.Blocks[:2])
		return 1, 3
	}
	t.Run("alone, no home: passes", func(t *testing.T) {
		rs := replicas(6)
		held(rs)
		c := surveyed(t, Options{Peers: PeersNone}, ruleKeys, rs)
		require.True(t, c.shared, "two replicas hold two blocks: a shared run past the leading one")
		_, _, ok := c.followLeading()
		assert.False(t, ok)
	})
	t.Run("alone, its home", func(t *testing.T) {
		rs := replicas(6)
		held(rs)
		c := surveyed(t, Options{Peers: PeersNone}, ruleKeys, rs)
		c.mem.own.Claim(c.hk, rs[5].Addr)
		i, _, ok := c.followLeading()
		assert.True(t, ok)
		assert.Equal(t, 5, i)
	})
	// top is the replica of among with the highest rank of the request's
	// own opening.
	top := func(rs []Replica, among []int) int {
		best := among[0]
		for _, i := range among {
			if rs[i].rank(ruleKeys.Blocks[2]) > rs[best].rank(ruleKeys.Blocks[2]) {
				best = i
			}
		}
		return best
	}
	all := []int{0, 1, 2, 3, 4, 5}
	// Which replicas hold the shared run, and whether the highest rank over
	// all is one of them: each case must tell the two rankings apart at
	// least once.
	holds := [][]int{{1, 3}, {0, 5}, {2, 4}, {0, 1, 2}, {3, 4, 5}, {0, 2, 4}, {1, 3, 5}, {0, 1, 2, 3}}
	apart := map[bool]int{}
	for _, hold := range holds {
		rs := replicas(6)
		for _, i := range hold {
			insert(&rs[i], ruleKeys.Blocks[:2])
		}
		c := surveyed(t, Options{Peers: PeersSome}, ruleKeys, rs)
		require.True(t, c.shared)
		require.Equal(t, len(hold), c.holders)
		want, few := top(rs, all), 2*len(hold) < len(rs)
		if few {
			want = top(rs, hold)
		}
		if top(rs, hold) != top(rs, all) {
			apart[few]++
		}
		i, m, ok := c.followLeading()
		assert.True(t, ok)
		assert.Equal(t, want, i, "held on %v", hold)
		assert.Equal(t, matchOf(ruleKeys, &rs[i]), m)
	}
	assert.Positive(t, apart[true], "no case of fewer than half the holders told the rankings apart")
	assert.Positive(t, apart[false], "no case of half the holders or more told the rankings apart")
	t.Run("with peers, the chosen replica past the load bound but within the cold one", func(t *testing.T) {
		for _, hold := range [][]int{{1, 3}, {0, 1, 2, 3}} {
			rs := replicas(6)
			for _, i := range hold {
				insert(&rs[i], ruleKeys.Blocks[:2])
			}
			want := top(rs, all)
			if 2*len(hold) < len(rs) {
				want = top(rs, hold)
			}
			rs[want].InFlight = 4 // bound: ceil(1.5*5/6)+2 = 4 admits 3; cold: ceil(3*5/6)+2 = 5 admits 4
			c := surveyed(t, Options{Peers: PeersSome}, ruleKeys, rs)
			require.False(t, c.bound.Admits(&rs[want]))
			require.True(t, c.cold.Admits(&rs[want]))
			i, _, ok := c.followLeading()
			assert.True(t, ok)
			assert.Equal(t, want, i, "held on %v", hold)
		}
	})
}

// TestReturnHome: a prefix with a recorded home goes there within the cold
// bound, else to the rendezvous home; one without passes.
func TestReturnHome(t *testing.T) {
	alone := Options{Peers: PeersNone}
	runRule(t, []ruleCase{
		{"no home: passes", alone, func([]Replica, []int, func() *candidates) {}, false, 0},
		{"its home", alone, func(rs []Replica, rank []int, c func() *candidates) {
			c().mem.own.Claim(HomeKey(ruleKeys), rs[rank[3]].Addr)
		}, true, 3},
		{"its home past the cold bound: the rendezvous home", alone, func(rs []Replica, rank []int, c func() *candidates) {
			for i := range rs {
				rs[i].InFlight = 2
			}
			rs[rank[3]].InFlight = 40 // cold bound ceil(3*51/6)+2 = 28
			c().mem.own.Claim(HomeKey(ruleKeys), rs[rank[3]].Addr)
		}, true, 0},
		{"with peers, its own home is not followed: the rendezvous home", Options{Peers: PeersSome}, func(rs []Replica, rank []int, c func() *candidates) {
			c().mem.own.Claim(HomeKey(ruleKeys), rs[rank[3]].Addr)
		}, true, 0},
	}, (*candidates).returnHome)
}

// TestDetourRule: a place whose queue, the request's uncached part
// included, exceeds the cheapest's by more than the slack is left.
func TestDetourRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pending int
		want    bool
	}{
		{"no queue", 0, false},
		{"within 1.5 prompts", 768, false}, // 768 + 0 against 0 + 512 + 768 slack
		{"past it", 1281, true},
	} {
		rs := replicas(2)
		insert(&rs[0], ruleKeys.Blocks)
		rs[0].PendingPrefill = tc.pending
		c := surveyed(t, Options{}, ruleKeys, rs)
		assert.Equal(t, tc.want, c.detour(0, 4), tc.name)
	}
}

// TestByLoad: a new prefix goes to the least recently chosen of the
// replicas within the slack of the least pending prefill.
func TestByLoad(t *testing.T) {
	rs := replicas(3)
	rs[2].PendingPrefill = 10_000
	c := surveyed(t, Options{}, ruleKeys, rs)
	c.mem.sent.mark(rs[0].Addr)
	assert.Equal(t, 1, c.byLoad(256), "0 chosen lately, 2 past the slack")
	c.mem.sent.mark(rs[1].Addr)
	assert.Equal(t, 0, c.byLoad(256), "now 0 was chosen least recently")
	assert.Equal(t, 2, c.byLoad(20_000), "within a wide slack the never-chosen one")
}

// TestNearRendezvous: the rendezvous home is near while its pending
// prefill is within the slack, its cache is not full and its engine
// reports no queue, or a queue while the bet on homes pays.
func TestNearRendezvous(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(r *Replica)
		pays bool
		want bool
	}{
		{"idle", func(*Replica) {}, false, true},
		{"queued past the slack", func(r *Replica) { r.PendingPrefill = 1000 }, false, false},
		{"engine queue", func(r *Replica) { r.EngineWaiting = 1 }, false, false},
		{"engine queue, the bet pays", func(r *Replica) { r.EngineWaiting = 1 }, true, true},
		{"queued past the slack, the bet pays", func(r *Replica) { r.PendingPrefill = 1000 }, true, false},
		{"cache full", func(r *Replica) { r.KVUsage = 0.97 }, false, false},
		{"cache full, the bet pays", func(r *Replica) { r.KVUsage = 0.97 }, true, false},
	} {
		rs := replicas(4)
		home := ranked(HomeKey(ruleKeys), rs)[0]
		tc.set(&rs[home])
		c := surveyed(t, Options{}, ruleKeys, rs)
		c.mem.finds.pays.Store(tc.pays)
		require.Equal(t, home, c.rendezvous)
		assert.Equal(t, tc.want, c.nearRendezvous(256), tc.name)
	}
}

// TestHomeFinds: the bet pays once enough placements at home found a
// sixteenth of their prompt there, token-weighted, and stops paying when
// later ones find nothing; a placement of no prompt counts for nothing.
func TestHomeFinds(t *testing.T) {
	var h homeFinds
	for range homeFindsMin - 1 {
		h.saw(1000, 1000)
	}
	assert.False(t, h.pays.Load(), "too few placements")
	h.saw(0, 0)
	assert.False(t, h.pays.Load(), "no prompt, no placement counted")
	h.saw(5000, 1000) // what an engine reports past the prompt counts as the prompt
	require.True(t, h.pays.Load(), "every placement found its prompt")
	assert.InDelta(t, 1, h.cached/h.prompt, 1e-9)

	// A share just under and just over a sixteenth, weighed by tokens:
	// one long prompt found a little outweighs many short ones that found
	// nothing.
	var under, over homeFinds
	for range homeFindsWindow {
		under.saw(0, 1000)
		over.saw(0, 1000)
		under.saw(110, 1000) // 5.5% of the two
		over.saw(140, 1000)  // 7%
	}
	assert.False(t, under.pays.Load(), "share %.3f", under.cached/under.prompt)
	assert.True(t, over.pays.Load(), "share %.3f", over.cached/over.prompt)
	var long homeFinds
	for range homeFindsMin {
		long.saw(0, 100)
		long.saw(0, 100)
		long.saw(600, 4000)
	}
	assert.True(t, long.pays.Load(), "share %.3f", long.cached/long.prompt)

	// Placements that find nothing close it again.
	n := 0
	for ; n < 10*homeFindsWindow && h.pays.Load(); n++ {
		h.saw(0, 1000)
	}
	assert.False(t, h.pays.Load())
	assert.Greater(t, n, homeFindsWindow, "a moving share: one empty placement does not close it")
}

// TestObserveHomeFinds: what the engine reported for a new prefix sent to
// its rendezvous home counts in the strategy's homeFinds, reports of other
// rules' placements do not, and a successor keeps them.
func TestObserveHomeFinds(t *testing.T) {
	s := newPrefixLoad(Options{})
	for range homeFindsWindow {
		s.Observe(Check{Reason: ReasonLoad, CachedTokens: 900, PromptTokens: 1000}, CheckCold)
	}
	assert.False(t, s.mem.Load().finds.pays.Load(), "placements by load are not at home")
	for range homeFindsMin {
		s.Observe(Check{Reason: ReasonRendezvous, CachedTokens: 900, PromptTokens: 1000}, CheckCold)
	}
	assert.True(t, s.mem.Load().finds.pays.Load())
	heir := newPrefixLoad(Options{})
	require.True(t, heir.Inherit(s))
	assert.True(t, heir.mem.Load().finds.pays.Load(), "the successor knows the bet pays")
}

// TestClaimRule: alone the choice is recorded; with a directory another
// router's earlier claim wins; a directory that does not answer leaves
// the rendezvous home when it was near.
func TestClaimRule(t *testing.T) {
	rs := replicas(4)
	rank := ranked(HomeKey(ruleKeys), rs)
	c := surveyed(t, Options{Peers: PeersNone}, ruleKeys, rs)
	i, why := c.claim(rank[2], ReasonLoad, false, false)
	assert.Equal(t, rank[2], i)
	assert.Equal(t, ReasonLoad, why)
	got, _ := c.mem.own.Home(HomeKey(ruleKeys))
	assert.Equal(t, rs[rank[2]].Addr, got, "recorded as its home")

	dir := NewHomeTable(4)
	dir.Claim(HomeKey(ruleKeys), rs[rank[1]].Addr)
	c = surveyed(t, Options{Directory: dir}, ruleKeys, rs)
	i, why = c.claim(rank[2], ReasonLoad, false, false)
	assert.Equal(t, rank[1], i, "another router claimed it first")
	assert.Equal(t, ReasonClaimed, why)

	down := &flakyClaims{}
	c = surveyed(t, Options{Directory: down}, ruleKeys, rs)
	i, why = c.claim(rank[2], ReasonLoad, true, true)
	assert.Equal(t, rank[0], i, "no answer: where it would go without a directory")
	assert.Equal(t, ReasonRendezvous, why)
}

// flakyClaims is a Directory that never answers a claim.
type flakyClaims struct{}

func (*flakyClaims) Home(uint64) (string, bool)          { return "", false }
func (*flakyClaims) Claim(uint64, string) (string, bool) { return "", false }

// TestSharedRun: a match held on two replicas counts as the leading run
// and the home is ranked by the first block past it; a match held on one
// replica, one no longer than the request's own leading run, or one that
// leaves no block past it changes nothing. History then means a match
// past what the replicas hold in common.
func TestSharedRun(t *testing.T) {
	noLead := Keys{Leading: 777, Blocks: []uint64{21, 22, 23, 24}, Bytes: 512, BlockBytes: 128}
	for _, tc := range []struct {
		name    string
		keys    Keys
		held    [][]uint64 // what replicas 0, 1, ... hold
		lead    int        // the leading run survey settles on
		hk      uint64     // the home key
		history bool       // whether followHistory then decides
	}{
		{"nothing held", noLead, nil, 0, 21, false},
		{"one replica holds two blocks: its history", noLead, [][]uint64{noLead.Blocks[:2]}, 0, 21, true},
		{"two hold the first block: shared", noLead, [][]uint64{noLead.Blocks[:1], noLead.Blocks[:1]}, 1, 22, false},
		{"two hold one block, one of them three: history past it", noLead,
			[][]uint64{noLead.Blocks[:1], noLead.Blocks[:3]}, 1, 22, true},
		{"two hold two blocks: shared to the second", noLead,
			[][]uint64{noLead.Blocks[:2], noLead.Blocks[:3], noLead.Blocks[:2]}, 2, 23, true},
		{"two hold it all: nothing past it to rank by", noLead,
			[][]uint64{noLead.Blocks, noLead.Blocks}, 0, 21, true},
		{"no longer than the request's own leading run", ruleKeys,
			[][]uint64{ruleKeys.Blocks[:1], ruleKeys.Blocks[:1]}, 1, 777, false},
		{"past the request's own leading run", ruleKeys,
			[][]uint64{ruleKeys.Blocks[:2], ruleKeys.Blocks[:2]}, 2, 13, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := replicas(6)
			for i, b := range tc.held {
				insert(&rs[i], b)
			}
			c := surveyed(t, Options{}, tc.keys, rs)
			assert.Equal(t, tc.lead, c.keys.LeadingBlocks, "leading run")
			assert.Equal(t, tc.hk, c.hk, "home key")
			_, _, ok := c.followHistory()
			assert.Equal(t, tc.history, ok, "history decides")
		})
	}
}

// TestSharedRunSpreadsConversations: conversations that all open with one
// prefix, held by every replica, each go to the home of their own
// opening: a router that never saw them places them where another router
// that ranks the same way would, and not all on one replica.
func TestSharedRunSpreadsConversations(t *testing.T) {
	rs := replicas(6)
	shared := []uint64{5}
	for i := range rs {
		insert(&rs[i], shared)
	}
	s, err := NewStrategy("prefix_load", Options{Peers: PeersSome})
	require.NoError(t, err)
	used := map[int]int{}
	agreed := 0
	for conv := uint64(1); conv <= 60; conv++ {
		keys := Keys{Leading: 777, Blocks: []uint64{5, 1000 + conv, 2000 + conv}, Bytes: 384, BlockBytes: 128}
		i := s.Pick(keys, rs)
		used[i]++
		if i == ranked(keys.Blocks[1], rs)[0] {
			agreed++
		}
	}
	assert.Equal(t, 60, agreed, "each at the rendezvous home of its own opening")
	assert.Len(t, used, 6, "spread over every replica, not piled on the shared prefix's home")
}
