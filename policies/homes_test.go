package policies

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHomeTable(t *testing.T) {
	h := NewHomeTable(4) // 16 slots
	_, ok := h.Home(1)
	assert.False(t, ok, "empty table")
	claim := func(k uint64, addr string) string {
		got, ok := h.Claim(k, addr)
		require.True(t, ok, "a local table always answers")
		return got
	}
	assert.Equal(t, "a:1", claim(1, "a:1"))
	assert.Equal(t, "a:1", claim(1, "b:1"), "the first claim wins")
	got, ok := h.Home(1)
	assert.True(t, ok)
	assert.Equal(t, "a:1", got)

	// A key that lands on a taken slot takes it over: the table forgets
	// the older key rather than growing.
	taken := uint64(0)
	for k := uint64(2); k < 1000; k++ {
		if h.slot(k) == h.slot(1) {
			taken = k
			break
		}
	}
	require.NotZero(t, taken, "no key shares key 1's slot among 998")
	assert.Equal(t, "c:1", claim(taken, "c:1"))
	_, ok = h.Home(1)
	assert.False(t, ok, "the older key lost its slot")
	got, _ = h.Home(taken)
	assert.Equal(t, "c:1", got)
	h.Learn(taken, "d:1")
	got, _ = h.Home(taken)
	assert.Equal(t, "d:1", got, "learning replaces")
}

// downDirectory is a shared directory that never answers.
type downDirectory struct{ claims int }

func (d *downDirectory) Home(uint64) (string, bool) { return "", false }
func (d *downDirectory) Claim(uint64, string) (string, bool) {
	d.claims++
	return "", false
}

// TestPrefixLoadDirectoryDown proves that when the shared directory does
// not answer, a new prefix is placed as with no directory: with peers, at
// its rendezvous home within the slack, not by this router's load alone.
func TestPrefixLoadDirectoryDown(t *testing.T) {
	d := &downDirectory{}
	s := mustStrategy(t, "prefix_load", Options{Peers: PeersSome, Directory: d})
	rs := replicas(6)
	keys := Keys{Leading: 4242, Blocks: []uint64{21, 22}, LeadingBlocks: 1, Bytes: 2000}
	rank := ranked(keys.Leading, rs)
	rs[rank[0]].PendingPrefill = 500 // within half of 2000
	assert.Equal(t, rank[0], s.Pick(keys, rs), "directory down: the rendezvous home")
	assert.Equal(t, 1, d.claims)
	rs[rank[0]].PendingPrefill = 1500
	assert.NotEqual(t, rank[0], s.Pick(keys, rs), "past the slack: by load")
}

func TestHomeKey(t *testing.T) {
	assert.Equal(t, uint64(7), HomeKey(Keys{Leading: 7, Blocks: []uint64{1, 2}, LeadingBlocks: 1}), "a leading run: the leading key")
	assert.Equal(t, uint64(1), HomeKey(Keys{Leading: 7, Blocks: []uint64{1, 2}}), "no leading block: the first block")
	assert.Equal(t, uint64(7), HomeKey(Keys{Leading: 7}), "no block at all: the leading key")
}

// senseViews feeds p n views of one replica where this router has own in
// flight and the engine reports eng running.
func senseViews(p *peerSense, n, own, eng int) {
	rs := replicas(1)
	for i := range rs {
		rs[i].InFlight, rs[i].EngineRunning, rs[i].EngineWaiting = own, eng, 0
	}
	for range n {
		p.observe(rs)
	}
}

func TestPeerSense(t *testing.T) {
	p := newPeerSense()
	assert.True(t, p.peers.Load(), "peers assumed until the metrics say otherwise")

	senseViews(p, 1000, 5, -1)
	assert.True(t, p.peers.Load(), "no engine metrics: no evidence")
	senseViews(p, 1000, 0, 7)
	assert.True(t, p.peers.Load(), "nothing of this router's in flight: no evidence")
	senseViews(p, 1000, 5, 3)
	assert.True(t, p.peers.Load(), "engines running much less than it sent (0.6x): no evidence")
	senseViews(p, 3, 1, 1)
	assert.True(t, p.peers.Load(), "3 in flight, summed: not yet one piece of evidence")
	senseViews(p, 15, 5, 5)
	assert.True(t, p.peers.Load(), "a few views do not flip it")
	senseViews(p, 1, 5, 5)
	assert.False(t, p.peers.Load(), "engines run what this router sent: no peers")
	senseViews(p, 1000, 5, 6)
	assert.False(t, p.peers.Load(), "a little more than sent (staleness): still none")

	// Two routers: the engines run twice what this one sent.
	senseViews(p, 47, 5, 10)
	assert.False(t, p.peers.Load(), "hysteresis: 47 views are not enough to turn it on")
	senseViews(p, 1, 5, 10)
	assert.True(t, p.peers.Load(), "peers")
	senseViews(p, 1000, 10, 10)
	assert.False(t, p.peers.Load(), "back to one router")
}

// TestPeerSenseLowConcurrency proves that views with little in flight add
// up: a lone gateway that never has 4 requests in flight learns that it is
// alone, and two gateways at that concurrency learn that they are not.
func TestPeerSenseLowConcurrency(t *testing.T) {
	alone := newPeerSense()
	views := 0
	for views < 1000 && alone.peers.Load() {
		senseViews(alone, 1, 1+views%2, 1+views%2) // 1 or 2 in flight, the engine agrees
		views++
	}
	assert.False(t, alone.peers.Load(), "a lone router with 1-2 in flight")
	assert.Equal(t, 16*3, views, "one piece of evidence per 4 requests summed (1+2+1), 16 to flip")

	// A stale scrape now and then (the engine still shows a request that
	// ended) does not pass for a peer.
	for i := range 300 {
		eng := 1
		if i%4 == 0 {
			eng = 2
		}
		senseViews(alone, 1, 1, eng)
	}
	assert.False(t, alone.peers.Load(), "staleness is not a peer")

	two := newPeerSense()
	senseViews(two, 1000, 3, 3)
	assert.False(t, two.peers.Load())
	for range 1000 {
		senseViews(two, 1, 1, 2) // the other router has as much there
		senseViews(two, 1, 2, 5)
	}
	assert.True(t, two.peers.Load(), "two routers with 1-2 in flight each")
}

// TestPeerSenseInTransit proves that engines counting a little less than
// this router had in flight at the scrape (requests on their way, or ended
// at the engine with their last bytes still on the way back) read as a
// lone router, as caddy in front of four replicas sees it (one in five
// views), while much less stays no evidence.
func TestPeerSenseInTransit(t *testing.T) {
	cases := []struct {
		name                string
		own, eng            int
		wantPeers, evidence bool
	}{
		{"0.9x", 10, 9, false, true},
		{"0.8x", 10, 8, false, true},
		{"0.7x: no evidence", 10, 7, true, false},
		{"1.5x and 2 more: peers", 10, 17, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPeerSense()
			senseViews(p, 100, c.own, c.eng)
			assert.Equal(t, c.wantPeers, p.peers.Load())
			assert.Equal(t, c.evidence, p.score.Load() != peerScoreMax/2, "whether the views moved the score")
		})
	}
}

// TestPeerSenseSampleTime proves that the engines' counts are judged
// against what this router had in flight when they were sampled: a lone
// router whose requests ended since the scrape (a lull) is not taken for
// one with peers, and one whose in-flight count grew since (a burst) while
// a peer loads the engines is not taken for alone. Judged against the count
// now, each comes out the other way.
func TestPeerSenseSampleTime(t *testing.T) {
	views := func(p *peerSense, n, now, since, eng int) {
		rs := replicas(1)
		rs[0].InFlight, rs[0].InFlightSinceSample, rs[0].EngineRunning, rs[0].EngineWaiting = now, since, eng, 0
		for range n {
			p.observe(rs)
		}
	}
	cases := []struct {
		name                string
		now, since, eng     int
		wantPeers, nowPeers bool // with the sample-time count; with the count now
	}{
		// 8 in flight at the scrape, the engine ran 8, 4 ended since.
		{"lull alone", 4, -4, 8, false, true},
		// 4 in flight at the scrape, the engine ran 8 (a peer's 4), 4 more sent since.
		{"burst with a peer", 8, 4, 8, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := newPeerSense()
			p.peers.Store(!c.wantPeers)
			views(p, 200, c.now, c.since, c.eng)
			assert.Equal(t, c.wantPeers, p.peers.Load(), "judged at sample time")

			q := newPeerSense()
			q.peers.Store(!c.nowPeers)
			views(q, 200, c.now, 0, c.eng)
			assert.Equal(t, c.nowPeers, q.peers.Load(), "judged against the count now, the other answer")
		})
	}
}

// TestPrefixLoadNewPrefixAlone proves a lone router's cold rules: a new
// prefix goes where the least prefill is pending, that replica becomes its
// home, and the prefix's later requests that match nothing or only its
// leading run go there; a match beyond the leading run follows the index.
func TestPrefixLoadNewPrefixAlone(t *testing.T) {
	s := mustStrategy(t, "prefix_load", Options{Peers: PeersNone})
	rs := replicas(6)
	keys := Keys{Leading: 4242, Blocks: []uint64{21, 22, 23, 24}, LeadingBlocks: 2, Bytes: 600, BlockBytes: 128}
	rank := ranked(keys.Leading, rs)
	for i := range rs {
		rs[i].PendingPrefill = 5000
	}
	rs[rank[3]].PendingPrefill = 100
	rs[rank[4]].PendingPrefill = 100
	rs[rank[4]].InFlight = 1
	assert.Equal(t, rank[3], s.Pick(keys, rs), "least pending prefill, then least load")

	for i := range rs {
		rs[i].PendingPrefill, rs[i].InFlight = 0, 0
	}
	assert.Equal(t, rank[3], s.Pick(keys, rs), "no match anywhere: its home, not the rendezvous one")
	rs[rank[0]].Index.(*Index).Insert(keys.Blocks[:2])
	assert.Equal(t, rank[3], s.Pick(keys, rs), "a match of the leading run alone: its home")
	rs[rank[1]].Index.(*Index).Insert(keys.Blocks[:3])
	assert.Equal(t, rank[1], s.Pick(keys, rs), "a match beyond the leading run: the index")

	// A home over the cold bound is not followed.
	rs[rank[1]].Index.(*Index).Purge()
	rs[rank[0]].Index.(*Index).Purge()
	for i := range rs {
		rs[i].InFlight = 2
	}
	rs[rank[3]].InFlight = 40 // cold bound ceil(3*51/6)+2 = 28
	assert.Equal(t, rank[0], s.Pick(keys, rs), "home past the cold bound: the rendezvous home")

	// A fresh router, everything equal: the new prefix goes to the higher
	// rank; then each next new prefix to a replica not chosen yet, as
	// round robin would, since the bytes queued there do not say how far
	// the engine got with them.
	f := mustStrategy(t, "prefix_load", Options{Peers: PeersNone})
	other := Keys{Leading: 99, Blocks: []uint64{31}, LeadingBlocks: 1, Bytes: 1000}
	fresh := replicas(6)
	assert.Equal(t, ranked(other.Leading, fresh)[0], f.Pick(other, fresh))
	// The replica just chosen shows the least queued (its prompt, short,
	// already had its first byte), the others a little more, within half a
	// prompt: the bytes alone would choose it again every time.
	seen := map[int]bool{}
	last := -1
	for k := uint64(1); k <= 6; k++ {
		for i := range fresh {
			fresh[i].PendingPrefill = 100
		}
		if last >= 0 {
			fresh[last].PendingPrefill = 0
		}
		last = f.Pick(Keys{Leading: 1000 + k, Blocks: []uint64{1000 + k}, LeadingBlocks: 1, Bytes: 1000}, fresh)
		seen[last] = true
	}
	assert.Len(t, seen, 6, "six new prefixes on six replicas")
}

// TestPrefixLoadNewPrefixWithPeers proves the rules with peers and no
// shared directory: a new prefix goes to its rendezvous home unless that
// has more prefill pending than the least by over ColdSlack times the
// prefix's own prompt, and
// when it comes back, or matches only its leading run, it goes to the
// rendezvous home whatever this router did the first time.
func TestPrefixLoadNewPrefixWithPeers(t *testing.T) {
	s := mustStrategy(t, "prefix_load", Options{Peers: PeersSome, ColdSlack: 0.5})
	rs := replicas(6)
	keys := Keys{Leading: 4242, Blocks: []uint64{21, 22, 23, 24}, LeadingBlocks: 2, Bytes: 2000}
	rank := ranked(keys.Leading, rs)
	rs[rank[0]].PendingPrefill = 1000
	assert.Equal(t, rank[0], s.Pick(keys, rs), "home within the slack")
	other := Keys{Leading: 777, Blocks: []uint64{41, 42}, LeadingBlocks: 1, Bytes: 2000}
	orank := ranked(other.Leading, rs)
	for i := range rs {
		rs[i].PendingPrefill = 0
	}
	rs[orank[0]].PendingPrefill = 1001
	rs[orank[2]].PendingPrefill = 0
	for _, i := range []int{orank[1], orank[3], orank[4], orank[5]} {
		rs[i].PendingPrefill = 1500 // past the slack too
	}
	assert.Equal(t, orank[2], s.Pick(other, rs), "home past the slack: the least pending")
	assert.Equal(t, orank[0], s.Pick(other, rs), "it came back: the rendezvous home, not the first placement")
	// Home queues 3001 + 2000 (its own prompt) against the cheapest's
	// 0 + 2000: past DetourSlack (1.5 x 2000) by one byte.
	rs[orank[0]].PendingPrefill = 3001
	assert.Equal(t, orank[2], s.Pick(other, rs), "it came back to a home queued past the detour slack: a detour")
	rs[orank[0]].PendingPrefill = 3000
	assert.Equal(t, orank[0], s.Pick(other, rs), "within the detour slack: home")
	rs[orank[0]].PendingPrefill = 1001
	rs[orank[2]].Index.(*Index).Insert(other.Blocks[:1])
	assert.Equal(t, orank[0], s.Pick(other, rs), "a leading-run match where it was placed by load: the rendezvous home")
	third := Keys{Leading: 31337, Blocks: []uint64{51, 52}, LeadingBlocks: 1, Bytes: 2000}
	trank := ranked(third.Leading, rs)
	rs[trank[3]].Index.(*Index).Insert(third.Blocks[:1])
	assert.Equal(t, trank[3], s.Pick(third, rs), "a leading-run match this router did not place by load stays")
	rs[orank[2]].Index.(*Index).Insert(other.Blocks)
	assert.Equal(t, orank[2], s.Pick(other, rs), "a match beyond the leading run: the index")
}

// TestPrefixLoadNewPrefixQueuedHome: with peers, a new prefix whose
// rendezvous home reports an engine queue or a full KV cache is placed by
// load, even when
// this router's own pending prefill there is within the slack (each
// router's pending prefill is its own share; the engine's queue is what
// they all see).
func TestPrefixLoadNewPrefixQueuedHome(t *testing.T) {
	s := mustStrategy(t, "prefix_load", Options{Peers: PeersSome})
	rs := replicas(4)
	keys := Keys{Leading: 4242, Blocks: []uint64{21, 22}, LeadingBlocks: 1, Bytes: 2000}
	rank := ranked(keys.Leading, rs)
	for i := range rs {
		rs[i].EngineWaiting = 0
	}
	assert.Equal(t, rank[0], s.Pick(keys, rs), "home, no queue anywhere")
	next := Keys{Leading: 5353, Blocks: []uint64{31, 32}, LeadingBlocks: 1, Bytes: 2000}
	nrank := ranked(next.Leading, rs)
	for i := range rs {
		rs[i].EngineWaiting = 0
	}
	rs[nrank[0]].EngineWaiting = 1
	got := s.Pick(next, rs)
	assert.NotEqual(t, nrank[0], got, "the home's engine queues: by load")
	assert.GreaterOrEqual(t, got, 0)

	third := Keys{Leading: 6464, Blocks: []uint64{41, 42}, LeadingBlocks: 1, Bytes: 2000}
	trank := ranked(third.Leading, rs)
	for i := range rs {
		rs[i].EngineWaiting, rs[i].KVUsage = 0, 0.5
	}
	// Within the slack by this router's own queue (500 of 1,000 bytes),
	// so only the KV usage says no.
	rs[trank[0]].KVUsage, rs[trank[0]].PendingPrefill = 0.97, 500
	got = s.Pick(third, rs)
	assert.NotEqual(t, trank[0], got, "the home's KV cache is full: by load")
	assert.GreaterOrEqual(t, got, 0)
}

// mapStore is a HomeStore in memory, as Valkey's SET NX GET answers; down
// makes it fail.
type mapStore struct {
	homes  map[uint64]string
	claims int
	down   bool
}

func newMapStore() *mapStore { return &mapStore{homes: map[uint64]string{}} }

func (m *mapStore) ClaimHome(key uint64, addr string) (string, bool) {
	m.claims++
	if m.down {
		return "", false
	}
	if h, ok := m.homes[key]; ok {
		return h, true
	}
	m.homes[key] = addr
	return addr, true
}

// TestStoreDirectory: Home answers only what this router's own claims
// were told; Claim asks the store every time and caches its answer; a
// store that does not answer teaches nothing.
func TestStoreDirectory(t *testing.T) {
	store := newMapStore()
	a, b := NewStoreDirectory(store), NewStoreDirectory(store)
	got, ok := a.Claim(7, "a:1")
	require.True(t, ok)
	assert.Equal(t, "a:1", got)
	h, ok := a.Home(7)
	assert.True(t, ok)
	assert.Equal(t, "a:1", h)
	_, ok = b.Home(7)
	assert.False(t, ok, "b has not asked the store about key 7")
	got, ok = b.Claim(7, "b:1")
	require.True(t, ok)
	assert.Equal(t, "a:1", got, "the store's first claim wins")
	h, _ = b.Home(7)
	assert.Equal(t, "a:1", h, "b learnt a's home from its claim")
	assert.Equal(t, 2, store.claims)

	store.down = true
	_, ok = b.Claim(8, "b:1")
	assert.False(t, ok)
	_, ok = b.Home(8)
	assert.False(t, ok, "a failed claim teaches nothing")
	h, _ = b.Home(7)
	assert.Equal(t, "a:1", h, "what was learnt stays")
}

// TestPrefixLoadSharedDirectory: two routers, each with its own view of
// the replicas and its own StoreDirectory over one store (as two caddy
// instances with one Valkey). The second router's first request of every
// prefix follows the first router's placement by load, also where its
// own view would have placed it elsewhere, or would have taken a detour
// from a home it took from its cache.
func TestPrefixLoadSharedDirectory(t *testing.T) {
	store := newMapStore()
	a := mustStrategy(t, "prefix_load", Options{Seed: 1, Peers: PeersSome, Directory: NewStoreDirectory(store)})
	b := mustStrategy(t, "prefix_load", Options{Seed: 2, Peers: PeersSome, Directory: NewStoreDirectory(store)})
	ra, rb := replicas(8), replicas(8)
	for i := range ra {
		ra[i].PendingPrefill = (i * 37 % 8) * 1000
		// b's queues differ by up to 7 prompts of 2000 bytes: past the
		// detour slack (1.5 prompts).
		rb[i].PendingPrefill = ((7 - i) * 53 % 8) * 2000
	}
	ownChoiceDiffers, pastDetour := 0, 0
	for k := uint64(1); k <= 200; k++ {
		keys := Keys{Leading: mix64(k), Blocks: []uint64{mix64(k + 1e6)}, LeadingBlocks: 1, Bytes: 2000}
		pa := a.Pick(keys, ra)
		alone := mustStrategy(t, "prefix_load", Options{Peers: PeersNone}).Pick(keys, rb)
		pb := b.Pick(keys, rb)
		require.Equal(t, pa, pb, "key %d", k)
		if alone != pa {
			ownChoiceDiffers++
		}
		if rb[pa].PendingPrefill > 2000*3/2 { // b's least is 0
			pastDetour++
		}
	}
	t.Logf("200 keys followed, %d where b alone would have chosen otherwise, %d past b's detour slack", ownChoiceDiffers, pastDetour)
	assert.GreaterOrEqual(t, ownChoiceDiffers, 100, "the views must disagree for agreement to mean something")
	assert.Positive(t, pastDetour, "some of a's homes must be past b's detour slack")
	assert.Equal(t, 400, store.claims, "one claim per prefix and router")
}

// laterStore is a mapStore that also claims later (LaterHomeStore): the
// test delivers the answers of the claims it holds.
type laterStore struct {
	*mapStore
	held []func()
}

func (l *laterStore) ClaimHomeLater(key uint64, addr string, done func(string, bool)) {
	l.held = append(l.held, func() { done(l.ClaimHome(key, addr)) })
}

// deliver answers every held claim, in order, and returns how many.
func (l *laterStore) deliver() int {
	n := len(l.held)
	for _, f := range l.held {
		f()
	}
	l.held = nil
	return n
}

// TestPrefixLoadUniqueRunClaimsLater proves the directory's claims leave
// the request's path during a unique run, and only then: the first
// UniqueRun new prefixes are claimed before their pick returns; from the
// next on the pick goes by load at once, even for a prefix another router
// already placed, and the claim is answered later; that answer naming
// another router's home ends the run, as does a claim made on the path
// that names one.
func TestPrefixLoadUniqueRunClaimsLater(t *testing.T) {
	store := &laterStore{mapStore: newMapStore()}
	dir := NewStoreDirectory(store)
	s := mustStrategy(t, "prefix_load", Options{Peers: PeersSome, Directory: dir, UniqueRun: 8})
	rs := replicas(4)
	rs[2].PendingPrefill = 0
	for i := range rs {
		if i != 2 {
			rs[i].PendingPrefill = 10000
		}
	}
	key := func(k uint64) Keys {
		return Keys{Leading: mix64(k), Blocks: []uint64{mix64(k + 1e6)}, LeadingBlocks: 1, Bytes: 2000}
	}
	for k := uint64(1); k <= 7; k++ {
		require.Equal(t, 2, s.Pick(key(k), rs))
	}
	require.Equal(t, 7, store.claims, "the first 7 claimed on the path")
	require.Empty(t, store.held)

	// The 8th new prefix in a row is the run: by load at once, also
	// where another router placed it.
	store.homes[HomeKey(key(9))] = rs[0].Addr
	for k := uint64(8); k <= 9; k++ {
		assert.Equal(t, 2, s.Pick(key(k), rs), "key %d by load, its claim not answered", k)
	}
	assert.Equal(t, 7, store.claims, "no claim on the path during the run")
	require.Equal(t, 2, store.deliver(), "both claimed later")
	home, ok := dir.Home(HomeKey(key(9)))
	assert.True(t, ok && home == rs[0].Addr, "the later answer is learnt: the prefix's next request goes to the other router's home")
	assert.Equal(t, 0, s.Pick(key(9), replicas(4)), "(no prefill queued anywhere: no detour)")

	// That answer ended the run: the next new prefixes are claimed on
	// the path, and a claim on the path that names another router's
	// home keeps the run from starting.
	claims := store.claims
	for k := uint64(10); k <= 15; k++ {
		s.Pick(key(k), rs)
	}
	store.homes[HomeKey(key(16))] = rs[1].Addr
	assert.Equal(t, 1, s.Pick(key(16), rs), "another router's home, claimed on the path")
	for k := uint64(17); k <= 23; k++ {
		s.Pick(key(k), rs)
	}
	assert.Equal(t, claims+14, store.claims, "every one claimed on the path")
	assert.Empty(t, store.held, "none claimed later")
	s.Pick(key(24), rs)
	assert.Len(t, store.held, 1, "8 new prefixes in a row since: the run again")
}

// slowDirectory is a Directory whose Claim runs during (a request
// picking while a claim's round trip to the store is out).
type slowDirectory struct {
	*StoreDirectory
	during func()
}

func (d *slowDirectory) Claim(key uint64, addr string) (string, bool) {
	if f := d.during; f != nil {
		d.during = nil
		f()
	}
	return d.StoreDirectory.Claim(key, addr)
}

// TestPrefixLoadClaimInFlight proves that a new prefix's replica counts
// as taken while its claim is out: a request that picks from the same view
// meanwhile (as concurrent selections do, the view unchanged until the
// first's placement) goes elsewhere, where before it chose the same
// replica. Counted over 100 pairs of new prefixes on idle replicas.
func TestPrefixLoadClaimInFlight(t *testing.T) {
	dir := &slowDirectory{StoreDirectory: NewStoreDirectory(newMapStore())}
	// Every prefix is new: no unique run, so that every claim is made on
	// the request's path.
	s := mustStrategy(t, "prefix_load", Options{Peers: PeersNone, Directory: dir, UniqueRun: -1})
	rs := replicas(4)
	same := 0
	for k := uint64(1); k <= 100; k++ {
		first := Keys{Leading: mix64(k), Blocks: []uint64{mix64(k + 1e6)}, LeadingBlocks: 1, Bytes: 2000}
		second := Keys{Leading: mix64(k + 2e6), Blocks: []uint64{mix64(k + 3e6)}, LeadingBlocks: 1, Bytes: 2000}
		inner := -1
		dir.during = func() { inner = s.Pick(second, rs) }
		outer := s.Pick(first, rs)
		require.GreaterOrEqual(t, inner, 0, "the second request picked while the claim was out")
		if inner == outer {
			same++
		}
	}
	assert.Zero(t, same, "requests picking while a claim is out went to the claimed replica")
}

// TestPrefixLoadClaimHoldReleased proves that the hold a claim puts on
// its replica stays only on the replica the request finally goes to: with
// the directory down (placed at the rendezvous home instead) and with a
// store that names another router's home, after every pick the one
// replica whose dispatch order moved is the one picked. Counts the picks
// where the hold was on another replica, which the release undid.
func TestPrefixLoadClaimHoldReleased(t *testing.T) {
	elsewhere := newMapStore()
	for _, c := range []struct {
		name string
		dir  Directory
	}{{"directory down", &downDirectory{}}, {"another router's home", NewStoreDirectory(elsewhere)}} {
		t.Run(c.name, func(t *testing.T) {
			s := mustStrategy(t, "prefix_load", Options{Peers: PeersSome, Directory: c.dir})
			sent := s.(*prefixLoad).mem.Load().sent
			rs := replicas(6)
			released := 0
			for k := uint64(1); k <= 200; k++ {
				keys := Keys{Leading: mix64(k), Blocks: []uint64{mix64(k + 1e6)}, LeadingBlocks: 1, Bytes: 2000}
				// Another router placed the prefix at its rendezvous home.
				elsewhere.homes[HomeKey(keys)] = rs[ranked(HomeKey(keys), rs)[0]].Addr
				before := make([]uint64, len(rs))
				for i := range rs {
					before[i] = sent.last(rs[i].Addr)
				}
				// The least recently chosen replica is where a hold goes.
				oldest := 0
				for i := range rs {
					if before[i] < before[oldest] {
						oldest = i
					}
				}
				p := s.Pick(keys, rs)
				require.GreaterOrEqual(t, p, 0)
				for i := range rs {
					if i != p {
						require.Equal(t, before[i], sent.last(rs[i].Addr), "key %d: replica %d's order moved, picked %d", k, i, p)
					}
				}
				assert.Greater(t, sent.last(rs[p].Addr), before[p])
				if p != oldest {
					released++
				}
			}
			t.Logf("%d of 200 picks went elsewhere than the held replica", released)
			assert.Positive(t, released, "the release must be exercised")
		})
	}
}

// TestPrefixLoadNewPrefixSpreads sends one-off prefixes to a lone router,
// each adding its prompt to the chosen replica's pending prefill until its
// first byte (two decisions later): they spread evenly, where rendezvous
// homes would have piled some on one replica.
func TestPrefixLoadNewPrefixSpreads(t *testing.T) {
	s := mustStrategy(t, "prefix_load", Options{Peers: PeersNone})
	rs := replicas(4)
	counts := make([]int, len(rs))
	var pending [][2]int // replica, bytes
	for k := uint64(1); k <= 400; k++ {
		if len(pending) == 2 {
			rs[pending[0][0]].PendingPrefill -= pending[0][1]
			pending = pending[1:]
		}
		keys := Keys{Leading: mix64(k), Blocks: []uint64{mix64(k + 1e6)}, LeadingBlocks: 1, Bytes: 8000}
		p := s.Pick(keys, rs)
		require.GreaterOrEqual(t, p, 0)
		counts[p]++
		rs[p].PendingPrefill += 8000
		pending = append(pending, [2]int{p, 8000})
		for i := range rs {
			require.LessOrEqual(t, rs[i].PendingPrefill, 8000, "two pending prompts on one replica of four: %v", fmt.Sprint(counts))
		}
	}
	for i, c := range counts {
		assert.InDelta(t, 100, c, 25, "replica %d got %d of 400", i, c)
	}
}

// TestPrefixLoadLoneGatewayLearnsAlone is the real-engine case that exposed
// the low-concurrency rule: one gateway, engine metrics on, never more
// than one request of its own in flight. It learns that it is alone, and
// from then on a prefix it placed by load stays where it went instead of
// moving to its rendezvous home on its second request.
func TestPrefixLoadLoneGatewayLearnsAlone(t *testing.T) {
	s := mustStrategy(t, "prefix_load", Options{})
	peers := s.(interface{ Peers() bool })
	require.True(t, peers.Peers(), "peers assumed at first")
	rs := replicas(2)
	views := 0
	for k := uint64(1); k <= 200 && peers.Peers(); k++ {
		// One request of its own in flight on replica k%2, which the
		// engine reports running; the pick is for the next one.
		for i := range rs {
			rs[i].InFlight, rs[i].EngineRunning, rs[i].EngineWaiting = 0, 0, 0
		}
		rs[k%2].InFlight, rs[k%2].EngineRunning = 1, 1
		s.Pick(Keys{Leading: 5000 + k, Blocks: []uint64{5000 + k}, LeadingBlocks: 1, Bytes: 1000}, rs)
		views++
	}
	assert.False(t, peers.Peers(), "a lone gateway with one request in flight learns it is alone")
	assert.Equal(t, 64, views, "16 pieces of evidence of 4 requests each")

	// A new prefix whose rendezvous home has more queued than the slack
	// allows goes by load, and comes back there.
	keys := Keys{Leading: 4242, Blocks: []uint64{21, 22}, LeadingBlocks: 1, Bytes: 1000}
	home := ranked(keys.Leading, rs)[0]
	for i := range rs {
		rs[i].InFlight, rs[i].EngineRunning, rs[i].PendingPrefill = 0, 0, 0
	}
	rs[home].PendingPrefill = 5000
	first := s.Pick(keys, rs)
	require.NotEqual(t, home, first, "by load")
	rs[home].PendingPrefill = 0
	assert.Equal(t, first, s.Pick(keys, rs), "alone: it stays where it went")
}

// TestPrefixLoadInherit proves that a successor takes over what its
// predecessor learned: that it is alone (a fresh strategy assumes peers),
// and where it placed a new prefix by load (a fresh one, alone, places it
// by load again; with peers, at its rendezvous home). A successor that
// shares a directory keeps the directory's homes; other strategies inherit
// nothing.
func TestPrefixLoadInherit(t *testing.T) {
	old := mustStrategy(t, "prefix_load", Options{})
	rs := replicas(4)
	for i := range rs {
		rs[i].InFlight, rs[i].EngineRunning, rs[i].EngineWaiting = 2, 2, 0
	}
	views := 0
	for ; views < 200 && old.(PeerSensor).Peers(); views++ {
		old.Pick(Keys{}, rs)
	}
	require.False(t, old.(PeerSensor).Peers(), "the predecessor learned it is alone (%d views)", views)

	// A new prefix placed by load: away from its rendezvous home.
	keys := Keys{Leading: 4242, Blocks: []uint64{21, 22}, LeadingBlocks: 1, Bytes: 1000, BlockBytes: 128}
	rank := ranked(keys.Leading, rs)
	for i := range rs {
		rs[i].PendingPrefill = 5000
	}
	rs[rank[2]].PendingPrefill = 0
	require.Equal(t, rank[2], old.Pick(keys, rs), "by load")
	for i := range rs {
		rs[i].PendingPrefill = 0
	}
	rs[rank[1]].PendingPrefill = 100 // the load now points elsewhere: rank 0
	require.Equal(t, rank[2], old.Pick(keys, rs), "it came back: its home")

	fresh := mustStrategy(t, "prefix_load", Options{})
	assert.True(t, fresh.(PeerSensor).Peers(), "a fresh strategy assumes peers")
	assert.Equal(t, rank[0], fresh.Pick(keys, rs), "a fresh strategy knows no home")

	heir := mustStrategy(t, "prefix_load", Options{ColdSlack: 2}) // other options: still inherits
	require.True(t, heir.(Successor).Inherit(old))
	assert.False(t, heir.(PeerSensor).Peers(), "the successor knows it is alone")
	assert.Equal(t, rank[2], heir.Pick(keys, rs), "the successor knows the prefix's home")

	// With a shared directory, homes are the directory's, not the
	// predecessor's own table.
	d := NewHomeTable(4)
	shared := mustStrategy(t, "prefix_load", Options{Directory: d})
	require.True(t, shared.(Successor).Inherit(old))
	assert.False(t, shared.(PeerSensor).Peers(), "the peer sense is inherited with a directory too")
	got := shared.Pick(keys, rs)
	assert.NotEqual(t, rank[2], got, "not the predecessor's own home")
	home, ok := d.Home(HomeKey(keys))
	assert.True(t, ok && home == rs[got].Addr, "placed as new, claimed in the directory")

	for _, name := range []string{"round_robin", "least_load", "prefix_affinity"} {
		_, ok := mustStrategy(t, name, Options{}).(Successor)
		assert.False(t, ok, "%s learns nothing to inherit", name)
	}
	assert.False(t, heir.(Successor).Inherit(mustStrategy(t, "least_load", Options{})), "nothing from another strategy")
	assert.False(t, heir.(Successor).Inherit(heir), "nothing from itself")
}
