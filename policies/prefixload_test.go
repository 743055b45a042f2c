package policies

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrefixLoad checks the rules every cold setting shares, with the
// router's peers known (the default view has no engine metrics, so the
// strategy assumes peers: a new prefix goes to its rendezvous home while
// its pending prefill is within ColdSlack of the least).
func TestPrefixLoad(t *testing.T) {
	const n = 6
	keys := Keys{Leading: 777, Blocks: []uint64{11, 12, 13, 14}, LeadingBlocks: 1}
	rank := ranked(keys.Leading, replicas(n))
	tests := []struct {
		name  string
		opts  Options
		setup func(rs []Replica)
		keys  *Keys // default keys
		want  []int // allowed answers
	}{
		{name: "cold prefix goes home", setup: func([]Replica) {}, want: []int{rank[0]}},
		{name: "resident prefix wins over home", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
		}, want: []int{rank[2]}},
		{name: "longest match wins", setup: func(rs []Replica) {
			rs[rank[1]].Index.(*Index).Insert(keys.Blocks[:2])
			rs[rank[4]].Index.(*Index).Insert(keys.Blocks[:3])
		}, want: []int{rank[4]}},
		{name: "equal matches go to the higher rank", setup: func(rs []Replica) {
			rs[rank[3]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[1]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[5]].Index.(*Index).Insert(keys.Blocks)
		}, want: []int{rank[1]}},
		{name: "a leading-run match this router did not place by load stays", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks[:1])
		}, want: []int{rank[2]}},
		{name: "match below MinMatchBlocks is cold", opts: Options{MinMatchBlocks: 3}, setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks[:2])
		}, want: []int{rank[0]}},
		{name: "match of the head alone is cold", opts: Options{MinMatchBlocks: 2}, setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks[:1])
		}, want: []int{rank[0]}},
		{name: "within slack the match keeps it", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].InFlight = 2
		}, want: []int{rank[2]}},
		{name: "match over the bound spills home", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].InFlight = 10 // bound: ceil(1.5*11/6)+2 = 5
		}, want: []int{rank[0]}},
		{name: "engine queue is load", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].EngineWaiting = 10
		}, want: []int{rank[0]}},
		{name: "busy home spills to next rank", setup: func(rs []Replica) {
			rs[rank[0]].InFlight = 10
		}, want: []int{rank[1]}},
		{name: "pure CHWBL splits at two", opts: Options{LoadSlack: -1}, setup: func(rs []Replica) {
			rs[rank[0]].InFlight = 2 // bound: ceil(1.25*3/6) = 1
		}, want: []int{rank[1]}},
		{name: "full home spills to next rank", setup: func(rs []Replica) {
			rs[rank[0]].Cap, rs[rank[0]].InFlight = 1, 1
		}, want: []int{rank[1]}},
		{name: "unavailable match is skipped", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].Unavailable = true
			rs[rank[3]].Index.(*Index).Insert(keys.Blocks[:2])
		}, want: []int{rank[3]}},
		// KV usage is sampled up to a scrape interval ago and no longer
		// cuts a replica out (releases before this one skipped a replica
		// reporting >= 0.95 while any other did not, which on the e2e
		// scenario piled a second's traffic onto the one that did not).
		{name: "a full KV cache reported does not move a match", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].KVUsage = 0.97
		}, want: []int{rank[2]}},
		{name: "every KV cache full still routes by match", setup: func(rs []Replica) {
			for i := range rs {
				rs[i].KVUsage = 0.99
			}
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
		}, want: []int{rank[2]}},
		{name: "within the average, home keeps it (peers)", setup: func(rs []Replica) {
			for i := range rs {
				rs[i].InFlight = 20
			}
			rs[rank[4]].InFlight = 3 // bound: ceil(1.5*104/6)+2 = 28
		}, want: []int{rank[0]}},
		{name: "cold home over the bound but within the cold bound stays home", setup: func(rs []Replica) {
			for i := range rs {
				rs[i].InFlight = 12
			}
			rs[rank[0]].InFlight = 23 // bound ceil(1.5*84/6)+2 = 23, cold bound ceil(3*84/6)+2 = 44
		}, want: []int{rank[0]}},
		{name: "cold home over the cold bound spills to next rank", setup: func(rs []Replica) {
			for i := range rs {
				rs[i].InFlight = 12
			}
			rs[rank[0]].InFlight = 70 // cold bound ceil(3*131/6)+2 = 68
		}, want: []int{rank[1]}},
		{name: "cold bound as tight as the bound spills the cold home", opts: Options{ColdBalanceFactor: 1.5}, setup: func(rs []Replica) {
			for i := range rs {
				rs[i].InFlight = 12
			}
			rs[rank[0]].InFlight = 23
		}, want: []int{rank[1]}},
		{name: "hot prefix at its home over the bound spills by the bound, not the cold bound", setup: func(rs []Replica) {
			for i := range rs {
				rs[i].InFlight = 12
			}
			rs[rank[0]].InFlight = 23
			rs[rank[0]].Index.(*Index).Insert(keys.Blocks)
		}, want: []int{rank[1]}},
		{name: "tight bound: only the least loaded is a candidate", opts: Options{BalanceFactor: 1, LoadSlack: -1, ColdBalanceFactor: 1}, setup: func(rs []Replica) {
			for i := range rs {
				rs[i].InFlight = 20
			}
			rs[rank[4]].InFlight = 3 // bound: ceil(104/6) = 18
			rs[rank[1]].Index.(*Index).Insert(keys.Blocks)
		}, want: []int{rank[4]}},
		{name: "no keys: least loaded", keys: &Keys{}, setup: func(rs []Replica) {
			for i := range rs {
				rs[i].InFlight = 2
			}
			rs[rank[3]].InFlight, rs[rank[5]].InFlight = 1, 1
			rs[rank[5]].Index.(*Index).Insert(keys.Blocks)
		}, want: []int{rank[3], rank[5]}},
		{name: "no keys: least load, whatever KV usage is reported", keys: &Keys{}, setup: func(rs []Replica) {
			for i := range rs {
				rs[i].InFlight = 2
			}
			rs[rank[3]].InFlight, rs[rank[5]].InFlight = 1, 1
			rs[rank[5]].KVUsage = 0.96
		}, want: []int{rank[3], rank[5]}},
		{name: "blocks without a leading key still match", keys: &Keys{Blocks: keys.Blocks, LeadingBlocks: 1}, setup: func(rs []Replica) {
			rs[rank[4]].Index.(*Index).Insert(keys.Blocks)
		}, want: []int{rank[4]}},
		{name: "nil indexes", setup: func(rs []Replica) {
			for i := range rs {
				rs[i].Index = nil
			}
		}, want: []int{rank[0]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustStrategy(t, "prefix_load", tt.opts)
			rs := replicas(n)
			tt.setup(rs)
			k := keys
			if tt.keys != nil {
				k = *tt.keys
			}
			for i := 0; i < 20; i++ {
				assert.Contains(t, tt.want, s.Pick(k, rs))
			}
		})
	}
}

// TestPrefixLoadDetour checks the detour rule: a request leaves the
// replica its prefix belongs to only when the prefill it would wait behind
// there, its own uncached part included, exceeds the cheapest
// candidate's by more than DetourSlack times its prompt.
func TestPrefixLoadDetour(t *testing.T) {
	const n = 6
	// Four blocks of 500 bytes: 2,000 bytes of prompt, slack 1.5 x 2,000.
	keys := Keys{Leading: 777, Blocks: []uint64{11, 12, 13, 14}, LeadingBlocks: 1, BlockBytes: 500, Bytes: 2000}
	rank := ranked(keys.Leading, replicas(n))
	tests := []struct {
		name  string
		opts  Options
		setup func(rs []Replica)
		want  int
	}{
		{name: "history queued past the slack: a detour to the cheapest", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].PendingPrefill = 5001 // 5,001 + 0 against 0 + 2,000 + 3,000
		}, want: rank[0]},
		{name: "history queued within the slack stays", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].PendingPrefill = 5000
		}, want: rank[2]},
		{name: "the detour goes where part of the prompt is resident", setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].PendingPrefill = 4001 // against rank[4]'s 0 + 1,000 + 3,000
			rs[rank[4]].Index.(*Index).Insert(keys.Blocks[:2])
		}, want: rank[4]},
		{name: "a smaller slack leaves sooner", opts: Options{DetourSlack: 0.25}, setup: func(rs []Replica) {
			rs[rank[2]].Index.(*Index).Insert(keys.Blocks)
			rs[rank[2]].PendingPrefill = 2501 // against 0 + 2,000 + 500
		}, want: rank[0]},
		{name: "a home holding the leading run, queued past the slack", setup: func(rs []Replica) {
			rs[rank[0]].Index.(*Index).Insert(keys.Blocks[:1])
			rs[rank[0]].PendingPrefill = 4501 // 4,501 + 1,500 against 0 + 2,000 + 3,000
		}, want: rank[1]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := replicas(n)
			tt.setup(rs)
			assert.Equal(t, tt.want, mustStrategy(t, "prefix_load", tt.opts).Pick(keys, rs))
		})
	}
}

// TestPrefixLoadBurst sends a burst of one hot prefix, each pick adding
// one in-flight request to the chosen replica (nothing completes), and
// checks the load bound after every pick and that the group stays home
// while load is low.
func TestPrefixLoadBurst(t *testing.T) {
	const n, burst = 8, 200
	for _, opts := range []Options{{}, {LoadSlack: -1}, {BalanceFactor: 2, LoadSlack: 4}} {
		o, err := opts.WithDefaults()
		require.NoError(t, err)
		t.Run(fmt.Sprintf("c=%v slack=%d", o.BalanceFactor, o.LoadSlack), func(t *testing.T) {
			s := mustStrategy(t, "prefix_load", opts)
			rs := replicas(n)
			keys := Keys{Leading: 99, Blocks: []uint64{1, 2, 3, 4, 5}, LeadingBlocks: 1}
			homeIdx := ranked(keys.Leading, rs)[0]
			for i := 1; i <= burst; i++ {
				p := s.Pick(keys, rs)
				require.GreaterOrEqual(t, p, 0)
				if i <= o.LoadSlack+1 {
					require.Equal(t, homeIdx, p, "pick %d left home at low load", i)
				}
				rs[p].InFlight++
				rs[p].Index.(*Index).Insert(keys.Blocks)
				max := 0
				for j := range rs {
					if rs[j].InFlight > max {
						max = rs[j].InFlight
					}
				}
				limit := int(math.Ceil(o.BalanceFactor*float64(i)/n)) + o.LoadSlack + 1
				require.LessOrEqual(t, max, limit, "after %d picks: %v", i, loads(rs))
			}
			t.Logf("loads after %d: %v (home %d)", burst, loads(rs), homeIdx)
		})
	}
}

func loads(rs []Replica) []int {
	out := make([]int, len(rs))
	for i := range rs {
		out[i] = rs[i].Load()
	}
	return out
}

// TestPrefixLoadInstancesAgree runs two router instances with their own
// indexes and seeds over the same replica loads: cold prefixes, their
// spills and their follow-ups land on the same replicas in both.
func TestPrefixLoadInstancesAgree(t *testing.T) {
	a := mustStrategy(t, "prefix_load", Options{Seed: 1, Peers: PeersSome})
	b := mustStrategy(t, "prefix_load", Options{Seed: 2, Peers: PeersSome})
	ra, rb := replicas(16), replicas(16)
	for i := range ra {
		ra[i].InFlight = i % 3
		rb[i].InFlight = i % 3
	}
	ra[3].InFlight, rb[3].InFlight = 30, 30 // over the bound in both
	// Agreement on a constant answer would prove nothing: the picks must
	// spread over the replicas, and some must spill from their home.
	picked := map[int]bool{}
	spills := 0
	for k := uint64(1); k <= 300; k++ {
		keys := Keys{Leading: mix64(k), Blocks: []uint64{mix64(k + 1e6), mix64(k + 2e6)}, LeadingBlocks: 1}
		pa, pb := a.Pick(keys, ra), b.Pick(keys, rb)
		require.Equal(t, pa, pb, "key %d", k)
		require.GreaterOrEqual(t, pa, 0, "key %d", k)
		assert.NotEqual(t, 3, pa)
		picked[pa] = true
		if pa != ranked(keys.Leading, ra)[0] {
			spills++
		}
		if k%2 == 0 { // only instance a learns the follow-up
			ra[pa].Index.(*Index).Insert(keys.Blocks)
			assert.Equal(t, pa, a.Pick(keys, ra))
			assert.Equal(t, pa, b.Pick(keys, rb))
		}
	}
	t.Logf("300 keys: %d replicas picked, %d spilled from home", len(picked), spills)
	assert.GreaterOrEqual(t, len(picked), 12, "replicas picked")
	assert.GreaterOrEqual(t, spills, 10, "keys spilled from their home")
}

// TestPrefixLoadUniqueRun checks the peer rule's gate: with peers, new
// prefixes go to their rendezvous home until UniqueRun keyed requests in
// a row found nothing seen before; from then on they are placed by load
// (the least recently chosen replica, every replica in turn here), until
// a prefix comes back or the engine reports one cached that this router
// believed cold. A successor keeps the run; UniqueRun -1 never gates.
func TestPrefixLoadUniqueRun(t *testing.T) {
	const n, run = 6, 4
	next := uint64(0)
	fresh := func() Keys {
		next++
		return Keys{Leading: mix64(next), Blocks: []uint64{mix64(next + 1e6), mix64(next + 2e6)}, LeadingBlocks: 1}
	}
	// placeNew picks count new prefixes and returns how many went to
	// their rendezvous home and how often each replica was picked.
	placeNew := func(s Strategy, rs []Replica, count int) (home int, per map[int]int) {
		per = map[int]int{}
		for range count {
			k := fresh()
			p := s.Pick(k, rs)
			require.GreaterOrEqual(t, p, 0)
			per[p]++
			if p == ranked(HomeKey(k), rs)[0] {
				home++
			}
		}
		return home, per
	}

	s := mustStrategy(t, "prefix_load", Options{Peers: PeersSome, UniqueRun: run})
	rs := replicas(n)
	home, _ := placeNew(s, rs, run-1)
	assert.Equal(t, run-1, home, "below the run: every new prefix goes home")
	home, per := placeNew(s, rs, 2*n)
	assert.Len(t, per, n, "past the run: by load, every replica in turn")
	for i, c := range per {
		assert.Equal(t, 2, c, "replica %d", i)
	}
	assert.Less(t, home, 2*n, "past the run some new prefixes leave their home")

	// A prefix that comes back ends the run: the next new prefix goes home.
	back := fresh()
	s.Pick(back, rs)
	s.Pick(back, rs)
	home, _ = placeNew(s, rs, run-1)
	assert.Equal(t, run-1, home, "after a prefix came back: home again")

	// So does an engine report of a prefix cached where this router
	// believed none (a peer placed it); a small cached part (a template's
	// head) or a checked prediction does not.
	placeNew(s, rs, run)
	obs := s.(CheckObserver)
	obs.Observe(Check{CachedTokens: 10, PromptTokens: 100}, CheckCold)
	obs.Observe(Check{PredictedBlocks: 3, CachedTokens: 90, PromptTokens: 100}, CheckHit)
	_, per = placeNew(s, rs, n)
	assert.Len(t, per, n, "still by load")
	obs.Observe(Check{CachedTokens: 50, PromptTokens: 100}, CheckCold)
	home, _ = placeNew(s, rs, run-1)
	assert.Equal(t, run-1, home, "after a peer's prefix was found cached: home again")

	// A prefix placed by load past the run is not provisional: when it
	// comes back matching only its leading run where it went, it stays
	// there (alone's rule), where a placement by load because its home
	// was busy goes home on its second request (TestPrefixLoadNewPrefixWithPeers).
	placeNew(s, rs, run)
	moved := 0
	for range 2 * n {
		k := fresh()
		p := s.Pick(k, rs)
		rs[p].Index.(*Index).Insert(k.Blocks[:1])
		if p != ranked(HomeKey(k), rs)[0] {
			moved++
			assert.Equal(t, p, s.Pick(k, rs), "a prefix placed by load past the run came back: it stays")
		}
	}
	assert.Positive(t, moved, "some placements by load left their rendezvous home")

	// A successor (a reload) goes on from where the run stood.
	placeNew(s, rs, run)
	succ := mustStrategy(t, "prefix_load", Options{Peers: PeersSome, UniqueRun: run})
	require.True(t, succ.(Successor).Inherit(s))
	_, per = placeNew(succ, rs, n)
	assert.Len(t, per, n, "the successor places by load at once")

	// Never: the peer rule whatever the traffic.
	never := mustStrategy(t, "prefix_load", Options{Peers: PeersSome, UniqueRun: -1})
	home, _ = placeNew(never, rs, 10*run)
	assert.Equal(t, 10*run, home, "UniqueRun -1: every new prefix goes home")

	// Alone the gate changes nothing: new prefixes go by load from the
	// first.
	alone := mustStrategy(t, "prefix_load", Options{Peers: PeersNone, UniqueRun: run})
	_, per = placeNew(alone, rs, n)
	assert.Len(t, per, n, "alone: by load")
}

// benchChat returns a chat body of about size bytes: a system prompt of a
// quarter of it and user/assistant turns for the rest.
func benchChat(size int) []byte {
	words := strings.Fields("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches")
	text := func(n, seed int) string {
		var sb strings.Builder
		for i := seed; sb.Len() < n; i++ {
			sb.WriteString(words[(i*7+i/len(words))%len(words)])
			sb.WriteByte(' ')
		}
		return sb.String()
	}
	var sb strings.Builder
	sb.WriteString(`{"model":"llama-3-8b","stream":true,"messages":[{"role":"system","content":"`)
	sb.WriteString(text(size/4, 0))
	sb.WriteString(`"}`)
	roles := []string{"user", "assistant"}
	for turn := 0; sb.Len() < size-64; turn++ {
		n := min(size/8, size-64-sb.Len())
		fmt.Fprintf(&sb, `,{"role":"%s","content":"%s"}`, roles[turn%2], text(max(n, 1), turn+1))
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// benchReplicas returns n replicas whose full indexes (4096 blocks each,
// to keep the benchmark's heap small) hold other traffic, two of which (the
// hot prefix's home and first spill) also hold keys' chain.
func benchReplicas(n int, keys Keys) []Replica {
	const capacity = 4096
	rs := replicas(n)
	for i := range rs {
		rs[i].InFlight = i % 4
		rs[i].Index = NewIndex(capacity)
		chain := make([]uint64, len(keys.Blocks))
		for c := 0; c < capacity/len(chain); c++ {
			for j := range chain {
				chain[j] = mix64(uint64(i)<<40 | uint64(c)<<16 | uint64(j))
			}
			rs[i].Index.(*Index).Insert(chain)
		}
	}
	r := ranked(keys.Leading, rs)
	rs[r[0]].Index.(*Index).Insert(keys.Blocks)
	rs[r[1]].Index.(*Index).Insert(keys.Blocks)
	return rs
}

func benchmarkPick(b *testing.B, n int) {
	req, err := Parse("/v1/chat/completions", benchChat(4<<10), ParseConfig{})
	require.NoError(b, err)
	rs := benchReplicas(n, req.Keys)
	s := mustStrategy(b, "prefix_load", Options{})
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s.Pick(req.Keys, rs)
	}
	b.ReportMetric(float64(len(req.Keys.Blocks)), "blocks")
}

func BenchmarkPick8(b *testing.B)   { benchmarkPick(b, 8) }
func BenchmarkPick64(b *testing.B)  { benchmarkPick(b, 64) }
func BenchmarkPick512(b *testing.B) { benchmarkPick(b, 512) }

// TestLoadCountsPrefilling proves requests awaiting their first byte weigh
// double in Load, and unknown engine figures add nothing.
func TestLoadCountsPrefilling(t *testing.T) {
	r := Replica{InFlight: 3, Prefilling: 2, EngineWaiting: -1}
	assert.Equal(t, 5, r.Load())
	r.EngineWaiting = 4
	assert.Equal(t, 9, r.Load())
}

// TestDispatchOrderHold: a hold marks a replica as chosen now; releasing
// it restores the order before, unless the replica was marked since.
func TestDispatchOrderHold(t *testing.T) {
	var d dispatchOrder
	d.mark("a")
	d.mark("b")
	h := d.hold("a")
	assert.Greater(t, d.last("a"), d.last("b"), "held: a is the latest")
	d.release(h)
	assert.Less(t, d.last("a"), d.last("b"), "released: the order before")

	h = d.hold("a")
	d.mark("a")
	marked := d.last("a")
	d.release(h)
	assert.Equal(t, marked, d.last("a"), "marked since the hold: the release leaves it")

	h = d.hold("c")
	d.release(h)
	assert.Zero(t, d.last("c"), "never chosen before: never chosen")
}
