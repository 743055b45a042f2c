package simengine

// kvCache is a paged KV cache with automatic prefix caching, after vLLM's
// block pool:
//
//   - every block has a reference count; blocks referenced by a running
//     sequence are pinned;
//   - a full block whose tokens are computed is registered under its chained
//     hash, so a later sequence with the same prefix can share it;
//   - unreferenced blocks sit on a free list. Blocks that hold a registered
//     hash are appended at the tail when released (least recently used at
//     the head); blocks holding nothing are pushed at the head, so they are
//     reused before any cached content is evicted;
//   - allocation takes the head of the free list; if that block holds a
//     hash the hash is dropped and the eviction counted.
type kvCache struct {
	blocks   []kvBlock
	byHash   map[uint64]int32
	head     int32 // first free block (next to allocate), or -1
	tail     int32 // last free block (most recently released), or -1
	numFree  int
	numCache int // blocks holding a registered hash
	evicted  uint64
}

// kvBlock is one block of the pool.
type kvBlock struct {
	hash       uint64
	hashed     bool
	ref        int32
	prev, next int32 // free-list links, -1 at the ends
	free       bool
}

func newKVCache(numBlocks int) *kvCache {
	c := &kvCache{blocks: make([]kvBlock, numBlocks), byHash: make(map[uint64]int32)}
	c.resetAll()
	return c
}

// resetAll drops every hash and reference and puts every block on the
// free list in index order.
func (c *kvCache) resetAll() {
	clear(c.byHash)
	c.head, c.tail, c.numFree, c.numCache, c.evicted = -1, -1, 0, 0, 0
	for i := range c.blocks {
		c.blocks[i] = kvBlock{prev: -1, next: -1}
		c.pushTail(int32(i))
	}
}

func (c *kvCache) unlink(id int32) {
	b := &c.blocks[id]
	if b.prev >= 0 {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next >= 0 {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next, b.free = -1, -1, false
	c.numFree--
}

func (c *kvCache) pushTail(id int32) {
	b := &c.blocks[id]
	b.prev, b.next, b.free = c.tail, -1, true
	if c.tail >= 0 {
		c.blocks[c.tail].next = id
	} else {
		c.head = id
	}
	c.tail = id
	c.numFree++
}

func (c *kvCache) pushHead(id int32) {
	b := &c.blocks[id]
	b.prev, b.next, b.free = -1, c.head, true
	if c.head >= 0 {
		c.blocks[c.head].prev = id
	} else {
		c.tail = id
	}
	c.head = id
	c.numFree++
}

// dropHash forgets block id's registered hash, if any.
func (c *kvCache) dropHash(id int32) {
	b := &c.blocks[id]
	if !b.hashed {
		return
	}
	if c.byHash[b.hash] == id {
		delete(c.byHash, b.hash)
	}
	b.hashed, b.hash = false, 0
	c.numCache--
}

// match returns the blocks holding the longest prefix of hashes, without
// changing any state.
func (c *kvCache) match(hashes []uint64) []int32 {
	var out []int32
	for _, h := range hashes {
		id, ok := c.byHash[h]
		if !ok {
			break
		}
		out = append(out, id)
	}
	return out
}

// matchLen is len(match(hashes)) without allocating.
func (c *kvCache) matchLen(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if _, ok := c.byHash[h]; !ok {
			break
		}
		n++
	}
	return n
}

// freeAmong counts the blocks of ids that sit on the free list (cached but
// unreferenced): acquiring them takes them off it.
func (c *kvCache) freeAmong(ids []int32) int {
	n := 0
	for _, id := range ids {
		if c.blocks[id].free {
			n++
		}
	}
	return n
}

// acquire adds a reference to a (cached) block, pinning it.
func (c *kvCache) acquire(id int32) {
	b := &c.blocks[id]
	if b.free {
		c.unlink(id)
	}
	b.ref++
}

// allocate takes the least recently used free block, evicting its cached
// content if it has any. The caller has checked numFree > 0.
func (c *kvCache) allocate() int32 {
	id := c.head
	c.unlink(id)
	if c.blocks[id].hashed {
		c.dropHash(id)
		c.evicted++
	}
	c.blocks[id].ref = 1
	return id
}

// release drops one reference; an unreferenced block goes to the free
// list, at the tail if it holds cached content, else at the head.
func (c *kvCache) release(id int32) {
	b := &c.blocks[id]
	b.ref--
	if b.ref > 0 {
		return
	}
	b.ref = 0
	if b.hashed {
		c.pushTail(id)
	} else {
		c.pushHead(id)
	}
}

// register records that block id holds the full block with the given hash.
// If another block already holds that hash, id stays unregistered (a
// duplicate computed concurrently), as in vLLM.
func (c *kvCache) register(id int32, hash uint64) {
	b := &c.blocks[id]
	if b.hashed {
		return
	}
	if _, dup := c.byHash[hash]; dup {
		return
	}
	b.hash, b.hashed = hash, true
	c.byHash[hash] = id
	c.numCache++
}

// dropAllHashes forgets every cached block's content; referenced blocks
// stay allocated to their sequences, and free ones become empty (moved to
// the head side of the free list). It returns how many hashes it dropped.
func (c *kvCache) dropAllHashes() int {
	n := c.numCache
	var freeIDs []int32
	for id := c.head; id >= 0; id = c.blocks[id].next {
		freeIDs = append(freeIDs, id)
	}
	for i := range c.blocks {
		c.dropHash(int32(i))
	}
	c.head, c.tail, c.numFree = -1, -1, 0
	for _, id := range freeIDs {
		c.pushTail(id)
	}
	return n
}

// used is the number of referenced blocks.
func (c *kvCache) used() int { return len(c.blocks) - c.numFree }
