package simengine

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// freeOrder lists the free list from head (next to allocate) to tail.
func freeOrder(c *kvCache) []int32 {
	var out []int32
	for id := c.head; id >= 0 && len(out) <= len(c.blocks); id = c.blocks[id].next {
		out = append(out, id)
	}
	return out
}

func TestKVCacheLRUEvictionOrder(t *testing.T) {
	c := newKVCache(4)
	a, b := c.allocate(), c.allocate()
	c.register(a, 100)
	c.register(b, 200)
	// Release b then a: b is least recently used, so evicted first.
	c.release(b)
	c.release(a)
	assert.Equal(t, []int32{2, 3, b, a}, freeOrder(c))
	assert.Equal(t, 4, c.numFree)

	// The two empty blocks go first, with no eviction.
	c.allocate()
	c.allocate()
	assert.Zero(t, c.evicted)
	got := c.allocate()
	assert.Equal(t, b, got)
	assert.EqualValues(t, 1, c.evicted)
	assert.Equal(t, []int32{a}, c.match([]uint64{100, 200}))
	assert.Equal(t, 1, c.numCache)
}

func TestKVCacheHitRefreshesRecency(t *testing.T) {
	c := newKVCache(2)
	a, b := c.allocate(), c.allocate()
	c.register(a, 1)
	c.register(b, 2)
	c.release(a)
	c.release(b) // order: a (LRU), b
	c.acquire(a) // a is used again...
	c.release(a) // ...and becomes most recent
	assert.Equal(t, []int32{b, a}, freeOrder(c))
	c.allocate()
	assert.Equal(t, 1, c.matchLen([]uint64{1}))
	assert.Equal(t, 0, c.matchLen([]uint64{2}))
}

func TestKVCachePinnedBlocksAreNotFree(t *testing.T) {
	c := newKVCache(3)
	a := c.allocate()
	c.register(a, 7)
	c.acquire(a) // a second sequence shares it
	c.release(a)
	assert.Equal(t, 2, c.numFree)
	assert.NotContains(t, freeOrder(c), a)
	c.allocate()
	c.allocate()
	assert.Zero(t, c.numFree)
	assert.Equal(t, []int32{a}, c.match([]uint64{7}), "pinned block kept its content")
	assert.Equal(t, 3, c.used())
}

func TestKVCacheDuplicateRegistration(t *testing.T) {
	c := newKVCache(2)
	a, b := c.allocate(), c.allocate()
	c.register(a, 9)
	c.register(b, 9) // computed concurrently: stays a plain block
	assert.Equal(t, 1, c.numCache)
	c.release(b)
	c.release(a)
	assert.Equal(t, []int32{b, a}, freeOrder(c), "the unregistered duplicate is reused first")
}

func TestKVCacheDropAllHashes(t *testing.T) {
	c := newKVCache(3)
	a, b := c.allocate(), c.allocate()
	c.register(a, 1)
	c.register(b, 2)
	c.release(a)
	require.Equal(t, 2, c.dropAllHashes())
	assert.Zero(t, c.numCache)
	assert.Empty(t, c.match([]uint64{1}))
	assert.Empty(t, c.match([]uint64{2}))
	assert.Equal(t, 2, c.numFree)
	c.release(b)
	assert.Equal(t, 3, c.numFree)
	assert.Zero(t, c.evicted)
}
