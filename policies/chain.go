package policies

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
	"github.com/zeebo/xxh3"
)

// Block hashing: the prompt's canonical rendering is cut into blocks and
// each FULL block is hashed seeded with the hash of the block before it,
// the way engines key their prefix caches. A trailing partial block is not
// part of the chain: an engine does not cache it either, and a later,
// longer request would fill that block with different bytes.
//
// The first denseBlocks blocks have the configured size; past them the
// blocks double in size every sparseRun blocks. Where two prompts part is
// thus located to within a block near the start, where system prompts,
// tools and conversations part, and more coarsely deep in a long prompt,
// where an agent's history grows: 640 blocks of 128 bytes and up reach
// 1,040 KiB for the price of 640 keys, where blocks of one size would take
// 8,320.

const (
	// DefaultBlockSize is the size in bytes of the chain's first blocks.
	// 128 bytes is about 32 tokens at ~4 bytes per token, i.e. two
	// 16-token engine blocks: fine enough that the shared prefix of two
	// requests is located to within a couple of engine blocks.
	DefaultBlockSize = 128
	// DefaultMaxBlocks caps the chain: 640 blocks, 256 of the block size
	// and then six runs of 64 blocks, each of twice the size before them,
	// reach 1,040 KiB of prompt at DefaultBlockSize: a 128K-token prompt
	// of text at up to 8 bytes a token. Longer prompts are routed by that
	// much.
	DefaultMaxBlocks = 640

	// denseBlocks is how many blocks have the configured size.
	denseBlocks = 256
	// sparseRun is how many blocks past denseBlocks keep one size before
	// the next doubling.
	sparseRun = 64
	// maxDoublings bounds the growth: the deepest blocks are 2^maxDoublings
	// times the configured size.
	maxDoublings = 10
)

// blockWeight is block i's size in blocks of the configured size: 1 for
// the dense blocks, then 2, 4, 8... every sparseRun blocks. The index
// counts its capacity in these units, so that a replica's belief covers
// as many bytes of prompt whatever the prompts' lengths.
func blockWeight(i int) int { return 1 << chainShift(i) }

// ChainBytes is how many bytes of rendering the first n blocks of a chain
// of blockBytes-sized blocks cover.
func ChainBytes(n, blockBytes int) int {
	if n <= denseBlocks {
		return n * blockBytes
	}
	units := denseBlocks
	for i := denseBlocks; i < n; {
		run := min(sparseRun-(i-denseBlocks)%sparseRun, n-i)
		units += run * blockWeight(i)
		i += run
	}
	return units * blockBytes
}

// ChainBlocks is how many whole blocks of a chain of blockBytes-sized
// blocks lie within its first bytes: the inverse of ChainBytes, rounded
// down.
func ChainBlocks(bytes, blockBytes int) int {
	if blockBytes <= 0 || bytes <= 0 {
		return 0
	}
	units := bytes / blockBytes
	if units <= denseBlocks {
		return units
	}
	n, units := denseBlocks, units-denseBlocks
	for {
		w := blockWeight(n)
		run := sparseRun
		if w == 1<<maxDoublings {
			return n + units/w
		}
		if units < run*w {
			return n + units/w
		}
		n, units = n+run, units-run*w
	}
}

// sink receives the canonical rendering of a prompt, its text escaped as
// in a JSON string (writeText, writeLit): a string literal of the body is
// then most often copied as it is, where decoding it would cost a pass
// over source code dense in escapes. It cuts the stream into blocks and
// chains their hashes, and never holds more than one block of the prompt.
type sink struct {
	// buf holds the previous block's hash (little endian) in buf[:8] and
	// the current block's bytes in buf[8:8+n]; it is 8 bytes longer than
	// the current block.
	buf    []byte
	n      int
	size   int // the configured block size: the first blocks'
	max    int
	blocks []uint64
	total  int // bytes written (text escaped), including those past the block cap
}

// initChain makes c a chain whose first block is seeded with seed.
// sizeHint (the body length) bounds the blocks slice's capacity.
func (c *sink) initChain(seed uint64, blockSize, maxBlocks, sizeHint int) {
	n := min(ChainBlocks(sizeHint, blockSize)+1, maxBlocks)
	// The buffer is made once, as large as the largest block the body can
	// fill, and resliced as the blocks grow.
	largest := blockWeight(max(n-1, 0)) * blockSize
	*c = sink{buf: make([]byte, 8+blockSize, 8+largest), size: blockSize, max: maxBlocks}
	binary.LittleEndian.PutUint64(c.buf, seed)
	c.blocks = make([]uint64, 0, n)
}

// WriteString appends s to the rendering as it is: the rendering's own
// markup (headers, terminators, raw JSON), and text already escaped;
// other text goes through writeText. A block that lies whole within s is
// hashed where it lies, not copied.
func (c *sink) WriteString(s string) {
	c.total += len(s)
	for len(s) > 0 && len(c.blocks) < c.max {
		if w := len(c.buf) - 8; c.n == 0 && len(s) >= w {
			c.chain(xxh3.HashStringSeed(s[:w], c.prev()))
			s = s[w:]
			continue
		}
		k := copy(c.buf[8+c.n:], s)
		c.n += k
		s = s[k:]
		c.flush()
	}
}

// Write appends p to the rendering as it is, like WriteString.
func (c *sink) Write(p []byte) {
	c.total += len(p)
	for len(p) > 0 && len(c.blocks) < c.max {
		if w := len(c.buf) - 8; c.n == 0 && len(p) >= w {
			c.chain(xxh3.HashSeed(p[:w], c.prev()))
			p = p[w:]
			continue
		}
		k := copy(c.buf[8+c.n:], p)
		c.n += k
		p = p[k:]
		c.flush()
	}
}

// flush hashes the current block once it is full: XXH3 of the block,
// seeded with the previous block's hash (the hashes are only compared for
// equality).
func (c *sink) flush() {
	if c.n < len(c.buf)-8 {
		return
	}
	c.chain(xxh3.HashSeed(c.buf[8:], c.prev()))
}

// prev is the hash the next block is seeded with.
func (c *sink) prev() uint64 { return binary.LittleEndian.Uint64(c.buf) }

// chain appends the hash of a full block and starts the next one; when
// that one is larger the buffer grows to it.
func (c *sink) chain(h uint64) {
	c.blocks = append(c.blocks, h)
	if next := 8 + blockWeight(len(c.blocks))*c.size; next != len(c.buf) && len(c.blocks) < c.max {
		if next <= cap(c.buf) {
			c.buf = c.buf[:next]
		} else {
			c.buf = make([]byte, next)
		}
	}
	binary.LittleEndian.PutUint64(c.buf, h)
	c.n = 0
}

// sofar identifies the rendering written so far: the last full block's
// hash (or the chain's seed) chained with the bytes after it, and the
// count of bytes written, which covers what lies past the block cap. The
// leading key takes the leading run's identity from it, so that the run is
// rendered and hashed once, with the rest of the prompt.
func (c *sink) sofar() uint64 {
	return xxh3.HashSeed(c.buf[:8+c.n], uint64(c.total))
}

// leadingFields are the leading key's fields but the leading run: the
// deployment, the model and cache_salt, each hashed on its own, so that
// field boundaries cannot shift: ("ab","c") and ("a","bc") give different
// keys. Tools are not among them: they are rendered into the chain right
// after the leading run (renderTools), where chat templates put them, so
// that requests with one system prompt and different tools share a home
// and the system prompt's blocks, as the engine shares those tokens.
type leadingFields [24]byte

func newLeadingFields(deployment, model, salt string) leadingFields {
	var f leadingFields
	binary.LittleEndian.PutUint64(f[0:], xxhash.Sum64String(deployment))
	binary.LittleEndian.PutUint64(f[8:], xxhash.Sum64String(model))
	binary.LittleEndian.PutUint64(f[16:], xxhash.Sum64String(salt))
	return f
}

// key is the leading key of these fields and a leading run's identity
// (sink.sofar; 0 for the chain's seed). It never returns 0, which Keys
// reserves for "no key".
func (f *leadingFields) key(run uint64) uint64 {
	var b [32]byte
	copy(b[:], f[:])
	binary.LittleEndian.PutUint64(b[24:], run)
	k := xxhash.Sum64(b[:])
	if k == 0 {
		k = 1
	}
	return k
}
