package policies

import (
	"math"
	"math/rand/v2"
)

// blockLRU is the residency index's store: a bounded set of block hashes
// evicted least recently used first, by generations. Every key added or
// re-added is stamped with the current generation; a generation closes
// once keys new to the store worth 1/genSlots of the capacity came in, or
// it holds a sixteenth of the capacity (keys added again move into it), and
// when the weight held passes the capacity the oldest generations are
// dropped whole. Eviction is thus LRU to within a generation: what the
// store holds is always the most recent keys, a little less of them than
// an exact LRU would hold (TestBlockLRUApproximatesLRU bounds how much).
//
// Keys live in one open-addressing table of 16-byte entries (key and
// stamp, no links), probed linearly from a seeded home. A placed prompt's
// new blocks are mostly new keys, and a full store evicts as many: here
// each costs the one cache line its probe reads, where a linked recency
// list with a separate key table costs several (the new key's entry, the
// evicted key's entry and its neighbours' links). Expired entries are
// reused by the probes that pass them and cleared by a sweep that walks a
// few entries per new key, closing each gap by shifting its successors
// back (no tombstones).
//
// Each key has a weight (blockWeight of its place in its chain): the
// capacity and the length count weights, so that a deep block standing
// for many bytes of prompt takes as much of the capacity.
//
// Keys are block hashes, already uniform, but a client chooses its
// prompts: they are mixed with a seed of the table's own, so that no one
// can aim blocks at one probe run. The table holds no pointer, so the
// garbage collector does not walk it, however large (BenchmarkIndexGC).
//
// It is not safe for concurrent use; Index locks around it.
type blockLRU struct {
	tab  []lruEntry
	mask uint64
	bits uint8 // log2(len(tab))
	seed uint64
	used int // entries of tab that are not empty: live or expired

	// cur is the generation keys are stamped with; entries stamped
	// before oldest have expired.
	cur, oldest uint64
	// weights is the weight held per live generation, at gen%genRing.
	weights [genRing]int
	// fresh is the weight of the keys new to the store in cur.
	fresh int

	len     int // the weight held
	size    int // the most weight held
	quantum int // fresh weight that closes a generation
	sweep   uint64
	warmed  uint64 // what warm read, kept so that its loads are made
}

// lruEntry is one key and its stamp: generation<<8 | weight shift. Key 0
// marks an empty entry (lruKey moves a real 0 aside).
type lruEntry struct {
	key, stamp uint64
}

const (
	// genSlots is how many generations of fresh keys the capacity holds:
	// eviction is exact to within 1/genSlots of it.
	genSlots = 256
	// genRing bounds the live generations, past which the oldest is
	// dropped before the capacity asks: a generation closed by its fresh
	// keys keeps them all while it lives (a key stamped later is in a
	// later generation), so at most genSlots+1 of those are live; one
	// closed by re-added keys empties as they are re-added again, and the
	// ring keeps the keys of the last 64 capacities' worth of re-adding.
	genRing = 4 * genSlots
	// recentGens is how lately a chain's held run must have been stamped
	// for AddChain to leave it as it is: 1/16 of the capacity's worth of
	// fresh keys, which is how much earlier than an exact LRU the run may
	// then be evicted.
	recentGens = genSlots / 16
	// sweepPerAdd is how many entries the sweep looks at per new key:
	// with the probes reusing the expired entries they pass, enough that
	// a table seldom needs clearing whole (makeRoom).
	sweepPerAdd = 2
	// minLRUTable is the smallest table; it doubles while more than half
	// of it would hold live keys.
	minLRUTable = 1 << minLRUBits
	minLRUBits  = 6
	// maxLRUSize bounds a store's capacity.
	maxLRUSize = math.MaxInt32
	// zeroKey stands for key 0, which marks empty entries.
	zeroKey = 0x9e3779b97f4a7c15
)

// newBlockLRU returns an empty store holding at most size weight (>= 1).
func newBlockLRU(size int) *blockLRU {
	l := &blockLRU{seed: rand.Uint64()}
	l.tab = make([]lruEntry, minLRUTable)
	l.mask, l.bits = minLRUTable-1, minLRUBits
	l.setSize(size)
	return l
}

func (l *blockLRU) setSize(size int) {
	l.size = min(max(size, 1), maxLRUSize)
	l.quantum = max(l.size/genSlots, 1)
}

func lruKey(key uint64) uint64 {
	if key == 0 {
		return zeroKey
	}
	return key
}

// home is key's first entry: the top bits of the seeded key times the
// golden ratio (Fibonacci hashing, one multiplication).
func (l *blockLRU) home(key uint64) uint64 {
	return ((key ^ l.seed) * 0x9e3779b97f4a7c15) >> (64 - l.bits)
}

// Contains reports whether key is held, without touching recency.
func (l *blockLRU) Contains(key uint64) bool {
	_, ok := l.stampOf(key)
	return ok
}

// stampOf returns the generation of a held key.
func (l *blockLRU) stampOf(key uint64) (uint64, bool) {
	key = lruKey(key)
	for i := l.home(key); ; i = (i + 1) & l.mask {
		e := &l.tab[i]
		if e.key == key {
			g := e.stamp >> 8
			return g, g >= l.oldest
		}
		if e.key == 0 {
			return 0, false
		}
	}
}

// Add makes key the most recent, adding it with weight 1<<shift when it is
// not held (and evicting the oldest generations past the capacity). A key
// is in the table at most once: a probe stops at the key, held or expired,
// and a new key takes the first expired entry of its probe run, or the
// empty entry that ends it.
func (l *blockLRU) Add(key uint64, shift uint8) {
	key = lruKey(key)
	// Most held keys are at their home entry: a shared prefix re-added
	// is only restamped.
	if e := &l.tab[l.home(key)]; e.key == key && e.stamp>>8 >= l.oldest && !l.closing() {
		l.restamp(e, l.cur)
		return
	}
	l.add(key, shift, 0, false)
}

// restamp moves a held entry to generation g, when it is older.
func (l *blockLRU) restamp(e *lruEntry, g uint64) {
	if old := e.stamp >> 8; old < g {
		w := 1 << (e.stamp & 0xff)
		l.weights[old%genRing] -= w
		l.weights[g%genRing] += w
		e.stamp = g<<8 | e.stamp&0xff
	}
}

// add is Add past its fast path; with behind set, a new key is stamped
// with generation back instead of the current one (AddChain).
func (l *blockLRU) add(key uint64, shift uint8, back uint64, behind bool) {
	if l.closing() {
		l.advance()
	}
	g := l.cur
	if behind {
		g = back
	}
	if 4*(l.used+1) > 3*len(l.tab) {
		l.makeRoom()
	}
	at, reuse := uint64(0), false
	i := l.home(key)
	for ; ; i = (i + 1) & l.mask {
		e := &l.tab[i]
		if e.key == key {
			if e.stamp>>8 >= l.oldest {
				l.restamp(e, g)
				return
			}
			at, reuse = i, true // expired: revived where it is
			break
		}
		if e.key == 0 {
			break
		}
		if !reuse && e.stamp>>8 < l.oldest {
			at, reuse = i, true
		}
	}
	if !reuse {
		at = i
		l.used++
	}
	w := 1 << shift
	if c := l.weights[l.cur%genRing]; !behind && c > 0 && c+w > l.size {
		l.advance() // the key would not fit beside the current generation
		g = l.cur
	}
	l.tab[at] = lruEntry{key: key, stamp: g<<8 | uint64(shift)}
	l.weights[g%genRing] += w
	l.len += w
	l.fresh += w
	l.sweepStep(sweepPerAdd)
	l.evict()
}

// AddChain is Add of each key of a chain (keys[0] its head, each key
// weighed by its place) from the last to the first, so that the head is
// the most recent: under pressure a chain goes from its tail, as in an
// engine's cache, and the blocks a shared head stands for survive longest.
// held is how many leading keys the caller found held (Index.matchLocked).
// When that run was stamped lately, within recentGens generations and in
// the newer half of those the store holds, it is left as it is and the
// keys after it join the generation of its last (its oldest): a conversation's next turn, or a prompt sent again, then costs
// only its new keys, and the chain is still evicted from its tail.
func (l *blockLRU) AddChain(keys []uint64, held int) {
	if held > 0 && held <= len(keys) {
		if g, ok := l.stampOf(keys[held-1]); ok && l.cur-g < recentGens && 2*(g-l.oldest) >= l.cur-l.oldest {
			for i := len(keys) - 1; i >= held; i-- {
				l.add(lruKey(keys[i]), chainShift(i), g, true)
			}
			return
		}
	}
	l.warm(keys)
	for i := len(keys) - 1; i >= 0; i-- {
		l.Add(keys[i], chainShift(i))
	}
}

// warm reads the home entry of every key before the adds do. A chain's
// entries are scattered over a table larger than a core's caches, and an
// add waits on its entry before the next one's load can start; these
// loads depend on nothing but the key, so the core has many of them in
// flight at once, and the adds then find their entries cached.
func (l *blockLRU) warm(keys []uint64) {
	var x uint64
	for _, k := range keys {
		x ^= l.tab[l.home(lruKey(k))].key
	}
	l.warmed = x
}

// newer is the weight held in generations later than g: how much was
// added or re-added since a key stamped g was, an LRU's distance from the
// most recent key to it (to within a generation, which it leaves out). It
// walks the live generations, at most genRing of them.
func (l *blockLRU) newer(g uint64) int {
	w := 0
	for h := max(g+1, l.oldest); h <= l.cur; h++ {
		w += l.weights[h%genRing]
	}
	return w
}

// chainShift is the weight, as a power of two, of the i-th block of a
// chain (blockWeight).
func chainShift(i int) uint8 {
	if i < denseBlocks {
		return 0
	}
	return uint8(min(1+(i-denseBlocks)/sparseRun, maxDoublings))
}

// closing reports whether the current generation is to close before the
// next key is stamped.
func (l *blockLRU) closing() bool {
	return l.fresh >= l.quantum || l.weights[l.cur%genRing] >= l.size/16
}

// advance closes the current generation.
func (l *blockLRU) advance() {
	if l.cur+1-l.oldest >= genRing {
		l.drop()
	}
	l.cur++
	l.weights[l.cur%genRing] = 0
	l.fresh = 0
}

// drop expires the oldest live generation: its entries stay in the table
// until a probe reuses them or the sweep clears them.
func (l *blockLRU) drop() {
	l.len -= l.weights[l.oldest%genRing]
	l.weights[l.oldest%genRing] = 0
	l.oldest++
}

// evict drops the oldest generations while the weight held passes the
// capacity; the current one stays (a single key heavier than the capacity
// is held, as an exact LRU holds it).
func (l *blockLRU) evict() {
	for l.len > l.size && l.oldest < l.cur {
		l.drop()
	}
}

// sweepStep looks at the next n entries, clearing those expired.
func (l *blockLRU) sweepStep(n int) {
	for range n {
		i := l.sweep & l.mask
		if e := &l.tab[i]; e.key != 0 && e.stamp>>8 < l.oldest {
			l.remove(i) // an entry may have moved into i: look again
			continue
		}
		l.sweep++
	}
}

// remove clears entry i: the entries after it in its probe run that may
// move back into the gap do, so that every key stays reachable from its
// home without a tombstone.
func (l *blockLRU) remove(i uint64) {
	for j := (i + 1) & l.mask; l.tab[j].key != 0; j = (j + 1) & l.mask {
		// The entry at j may fill the gap at i unless its home lies
		// cyclically in (i, j]: then it would move before its home.
		if h := l.home(l.tab[j].key); (j-h)&l.mask >= (j-i)&l.mask {
			l.tab[i] = l.tab[j]
			i = j
		}
	}
	l.tab[i] = lruEntry{}
	l.used--
}

// makeRoom clears every expired entry, then doubles the table if more than
// half of it is still in use.
func (l *blockLRU) makeRoom() {
	for i := uint64(0); i < uint64(len(l.tab)); {
		if e := &l.tab[i]; e.key != 0 && e.stamp>>8 < l.oldest {
			l.remove(i)
			continue
		}
		i++
	}
	if 2*(l.used+1) <= len(l.tab) {
		return
	}
	old := l.tab
	l.tab = make([]lruEntry, 2*len(old))
	l.mask = uint64(len(l.tab) - 1)
	l.bits++
	l.used, l.sweep = 0, 0
	for _, e := range old {
		if e.key == 0 || e.stamp>>8 < l.oldest {
			continue
		}
		i := l.home(e.key)
		for l.tab[i].key != 0 {
			i = (i + 1) & l.mask
		}
		l.tab[i] = e
		l.used++
	}
}

// Len returns the weight held: the number of keys when every key weighs 1.
func (l *blockLRU) Len() int { return l.len }

// Resize changes the capacity (in weight), evicting the oldest generations
// past it; when the current one alone is past it, it goes too.
func (l *blockLRU) Resize(size int) {
	l.setSize(size)
	l.evict()
	if l.len > l.size {
		l.advance()
		l.evict()
	}
}

// Purge removes every key.
func (l *blockLRU) Purge() {
	clear(l.tab)
	clear(l.weights[:])
	l.used, l.len, l.fresh = 0, 0, 0
	l.cur++
	l.oldest = l.cur
}
