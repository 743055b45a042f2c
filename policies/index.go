package policies

import (
	"sync"
	"sync/atomic"
)

// DefaultIndexCapacity is a suggested per-replica capacity in blocks:
// 16384 blocks of 128 bytes are 2 MiB of prompt text, about 512K tokens,
// roughly the KV cache of one 80 GB GPU serving an 8B model. An index much
// larger than the engine's cache believes in blocks the engine has evicted;
// a much smaller one forgets blocks the engine still holds.
const DefaultIndexCapacity = 16384

// Index is one replica's approximate residency index: a bounded LRU of the
// block hashes of prompts routed to that replica. Its capacity is counted
// in blocks of the chain's first size: a deeper, larger block counts as
// many (blockWeight), so the index covers as many bytes of prompt as the
// engine's cache whatever the prompts' lengths. It records what was sent,
// not what the engine kept, so it is a belief that feedback corrects
// (SetCapacity, Purge).
//
// Memory: about 42 bytes of heap per entry on 64-bit platforms, measured by
// TestIndexBytesPerEntry over 100k entries: a 16-byte table entry (key and
// stamp) in a table kept under half full of live keys, none of it pointers
// (lru.go): the garbage collector does not walk an index, however large.
// DefaultIndexCapacity thus costs about 0.5 MiB per replica, and any index
// 8 KiB of generation counts.
//
// It is safe for concurrent use: one mutex around the store locks once per
// chain, not once per block, and makes Insert of a chain atomic. Match reads
// the store without touching recency, so that asking about a replica does
// not make its entries look used.
//
// Match first looks, without the lock, at a filter of the chains' first
// blocks (heads): a chain whose head was never inserted since the last
// Purge matches nothing, and a decision that asks every replica about a
// prefix only one of them holds takes one lock, not one per replica.
type Index struct {
	mu  sync.Mutex
	lru *blockLRU
	cap int
	// heads has the bit of every chain head inserted since the last Purge
	// set. Eviction leaves bits set (a stale bit only costs a
	// look under the lock), so a clear bit is certain: that head is not
	// held.
	heads [headWords]atomic.Uint64
}

// headWords sizes the head filter: 4,096 bits, 512 bytes per replica; with
// a few hundred distinct prefixes per replica most clear bits stay clear.
const headWords = 64

// headBit returns the filter word and bit of a head.
func headBit(h uint64) (int, uint64) {
	return int(h>>6) % headWords, 1 << (h & 63)
}

// mayHold reports whether the head filter allows that head to be held.
func (ix *Index) mayHold(head uint64) bool {
	w, bit := headBit(head)
	return ix.heads[w].Load()&bit != 0
}

// NewIndex returns an empty index holding at most capacityBlocks block
// hashes; capacityBlocks < 1 selects DefaultIndexCapacity.
func NewIndex(capacityBlocks int) *Index {
	if capacityBlocks < 1 {
		capacityBlocks = DefaultIndexCapacity
	}
	return &Index{lru: newBlockLRU(capacityBlocks), cap: capacityBlocks}
}

// Insert records that blocks (one chain, head first) were sent to the
// replica. It adds them tail first so that the head is the most recently
// used: under pressure a chain is evicted from its tail, like an engine's
// cache, and a shared head (system prompt) survives longest.
// The held run is matched first, as MatchInsert does: the store places a
// lately stamped run's new blocks without restamping it (blockLRU.AddChain).
func (ix *Index) Insert(blocks []uint64) { ix.MatchInsert(blocks) }

// insertLocked inserts the chain, whose first held blocks are held.
func (ix *Index) insertLocked(blocks []uint64, held int) {
	w, bit := headBit(blocks[0])
	ix.heads[w].Or(bit)
	ix.lru.AddChain(blocks, held)
}

// Match returns how many leading blocks of the chain are believed resident:
// the length of the chain's leading run the index holds. The chain is
// matched from its head, as chains are inserted (a chain that begins inside
// an inserted one matches nothing). It does not change recency, so asking
// about a replica that is then not chosen leaves its index as it was. A nil
// index matches nothing.
//
// What the index holds of a chain is always a leading run: a block's hash
// covers its whole prefix (chain.go), so every chain that holds block i
// holds blocks 0..i-1 too, and every Insert adds them after block i, in
// the same locked step; block i-1 is thus always at least as recent as
// block i (stamped with the same generation or a later one), and eviction
// (oldest generations first, also by SetCapacity) takes a chain's blocks
// from its end. Match therefore finds the run's end by bisection:
// about log2(len) lookups instead of one per block (TestIndexLeadingRun
// checks it against a walk of every block).
func (ix *Index) Match(blocks []uint64) int {
	if ix == nil || len(blocks) == 0 || !ix.mayHold(blocks[0]) {
		return 0
	}
	ix.mu.Lock()
	n := ix.matchLocked(blocks)
	ix.mu.Unlock()
	return n
}

// MatchInsert is Match followed by Insert of the same chain, under one
// lock: what placing a prompt on the replica does.
func (ix *Index) MatchInsert(blocks []uint64) int {
	held, _ := ix.matchInsert(blocks, false)
	return held
}

// MatchInsertReach is MatchInsert that also returns the chain's reach
// when a leading run of it is held: the weight the index held stamped
// later than the run's last block, before the insert. An engine whose
// cache was sent what this index was and evicted that block held less
// than the reach (Belief.Check); it costs a walk of up to a thousand
// generation counts.
func (ix *Index) MatchInsertReach(blocks []uint64) (held, reach int) {
	return ix.matchInsert(blocks, true)
}

// matchInsert is MatchInsert, and MatchInsertReach when withReach.
func (ix *Index) matchInsert(blocks []uint64, withReach bool) (held, reach int) {
	if ix == nil || len(blocks) == 0 {
		return 0, 0
	}
	ix.mu.Lock()
	if ix.mayHold(blocks[0]) {
		held = ix.matchLocked(blocks)
	}
	if withReach && held > 0 {
		if g, ok := ix.lru.stampOf(blocks[held-1]); ok {
			reach = ix.lru.newer(g)
		}
	}
	ix.insertLocked(blocks, held)
	ix.mu.Unlock()
	return held, reach
}

// matchLocked bisects the chain for the end of its held leading run: held
// are blocks[:lo], not held blocks[hi] (when hi < len).
func (ix *Index) matchLocked(blocks []uint64) int {
	if !ix.lru.Contains(blocks[0]) {
		return 0
	}
	last := len(blocks) - 1
	if ix.lru.Contains(blocks[last]) { // a repeated prompt: held whole
		return len(blocks)
	}
	lo, hi := 1, last
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if ix.lru.Contains(blocks[mid]) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Purge empties the index, for a replica restart, a cache reset or removal.
func (ix *Index) Purge() {
	if ix == nil {
		return
	}
	ix.mu.Lock()
	ix.lru.Purge()
	for i := range ix.heads {
		ix.heads[i].Store(0)
	}
	ix.mu.Unlock()
}

// Len returns the blocks held, a deeper block counting its weight.
func (ix *Index) Len() int {
	if ix == nil {
		return 0
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.lru.Len()
}

// Capacity returns the most blocks the index holds (Len's units).
func (ix *Index) Capacity() int {
	if ix == nil {
		return 0
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.cap
}

// SetCapacity changes the capacity, evicting the least recently used
// entries when shrinking; n < 1 selects DefaultIndexCapacity.
func (ix *Index) SetCapacity(n int) {
	if ix == nil {
		return
	}
	if n < 1 {
		n = DefaultIndexCapacity
	}
	ix.mu.Lock()
	ix.lru.Resize(n)
	ix.cap = n
	ix.mu.Unlock()
}
