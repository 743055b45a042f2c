package policies

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
	"github.com/zeebo/xxh3"
)

// Block hashing: the prompt's canonical rendering is cut into fixed-size
// blocks and each FULL block is hashed together with the hash of the block
// before it, the way engines key their prefix caches. A trailing partial block
// is not part of the chain: an engine does not cache it either, and a later,
// longer request would fill that block with different bytes.

const (
	// DefaultBlockSize is the block size in bytes of the rendered prompt.
	// 128 bytes is about 32 tokens at ~4 bytes per token, i.e. two 16-token
	// engine blocks: fine enough that the shared prefix of two requests is
	// located to within a couple of engine blocks, coarse enough that
	// DefaultMaxBlocks covers 32 KiB of prompt and a Pick stays cheap.
	DefaultBlockSize = 128
	// DefaultMaxBlocks caps the chain: 256 blocks of 128 bytes cover 32 KiB
	// (~8K tokens). Longer prompts are still routed by their first 32 KiB,
	// which is where shared prefixes live; a longer cap costs index memory
	// and Match time for little gain.
	DefaultMaxBlocks = 256
)

// sink receives the canonical rendering of a prompt. With digest set it
// only feeds that running hash (used for the leading-key fields); otherwise
// it cuts the stream into blocks and chains their hashes. It never holds
// more than one block of the prompt.
type sink struct {
	digest *xxhash.Digest

	// buf holds the previous block's hash (little endian) in buf[:8] and
	// the current block's bytes in buf[8:8+n].
	buf    []byte
	n      int
	size   int
	max    int
	blocks []uint64
	total  int // bytes written, including those past the block cap
}

// initChain makes c a chain whose first block is seeded with leading.
// sizeHint (the body length) bounds the blocks slice's capacity.
func (c *sink) initChain(leading uint64, blockSize, maxBlocks, sizeHint int) {
	*c = sink{buf: make([]byte, 8+blockSize), size: blockSize, max: maxBlocks}
	binary.LittleEndian.PutUint64(c.buf, leading)
	n := sizeHint/blockSize + 1
	if n > maxBlocks {
		n = maxBlocks
	}
	c.blocks = make([]uint64, 0, n)
}

// capped reports whether the chain has all its blocks: what is written
// after only adds to the byte count.
func (c *sink) capped() bool { return c.digest == nil && len(c.blocks) >= c.max }

// WriteString appends s to the rendering.
func (c *sink) WriteString(s string) {
	if c.digest != nil {
		c.digest.WriteString(s)
		return
	}
	c.total += len(s)
	for len(s) > 0 && len(c.blocks) < c.max {
		k := copy(c.buf[8+c.n:], s)
		c.n += k
		s = s[k:]
		c.flush()
	}
}

// Write appends p to the rendering.
func (c *sink) Write(p []byte) {
	if c.digest != nil {
		c.digest.Write(p)
		return
	}
	c.total += len(p)
	for len(p) > 0 && len(c.blocks) < c.max {
		k := copy(c.buf[8+c.n:], p)
		c.n += k
		p = p[k:]
		c.flush()
	}
}

// flush hashes the current block once it is full: XXH3 of the previous
// hash and the block (136 bytes, which XXH3 hashes in half XXH64's time;
// the hashes are only compared for equality).
func (c *sink) flush() {
	if c.n < c.size {
		return
	}
	h := xxh3.Hash(c.buf)
	c.blocks = append(c.blocks, h)
	binary.LittleEndian.PutUint64(c.buf, h)
	c.n = 0
}

// leadingKey combines the leading-key fields. Each field is hashed on its own
// and the fixed-size hashes are hashed together, so field boundaries cannot
// shift: ("ab","c") and ("a","bc") give different keys. It never returns 0,
// which Keys reserves for "no key".
func leadingKey(deployment, model, salt string, tools, system uint64) uint64 {
	var b [40]byte
	binary.LittleEndian.PutUint64(b[0:], xxhash.Sum64String(deployment))
	binary.LittleEndian.PutUint64(b[8:], xxhash.Sum64String(model))
	binary.LittleEndian.PutUint64(b[16:], xxhash.Sum64String(salt))
	binary.LittleEndian.PutUint64(b[24:], tools)
	binary.LittleEndian.PutUint64(b[32:], system)
	k := xxhash.Sum64(b[:])
	if k == 0 {
		k = 1
	}
	return k
}
