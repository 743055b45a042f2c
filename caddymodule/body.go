package caddymodule

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
	"sync"
)

// The request body: read once into one buffer, sent to every attempt
// through a reader of its own, and given back to a pool once nothing can
// read it any more. The buffer keeps room before the body, so that asking
// the engine for usage (withIncludeUsage) inserts stream_options in place
// instead of copying the body.
//
// A body of pooledBodyMin bytes or more is read into a pooled buffer. Its readers hold it:
// the transport closes an attempt's reader once it has sent the body (Go's
// RoundTrip always closes the request body), and a Read in progress holds
// it too, so that a buffer is never reused while a transport goroutine
// still copies from it, even one that outlived its attempt. Once the
// request is settled (routeCtx.finish) every reader is cut off (a later
// Read fails) and the buffer goes back when the last Read in progress
// ends. A body under pooledBodyMin is not pooled (its allocation is small)
// and its readers are plain in-memory readers. Go's transport would send
// the headers and such a body in one write, but reverse_proxy wraps every
// request body before the transport sees it, so under Caddy the body is
// written apart from the headers whatever its reader: nothing is lost by
// pooling down to 1 KiB, and a 4 KiB prompt's body (about half of what a
// request would allocate of llmroute's own) stays out of the collector.

// includeUsageField is what withIncludeUsage inserts; bodyHeadroom is the
// room kept for it before the body.
const (
	includeUsageField = `"stream_options":{"include_usage":true},`
	bodyHeadroom      = len(includeUsageField)
)

// pooledBodyMin is the smallest body read into a pooled buffer.
const pooledBodyMin = 1 << 10

// bodyBuf is one request's body buffer: the body is b[off:off+n].
type bodyBuf struct {
	b   []byte
	off int
	// class is the pool the buffer belongs to, -1 when not pooled.
	class int

	mu sync.Mutex
	// holds counts the request's own hold and its readers not closed yet;
	// busy the Reads in progress. retired is set when the request is
	// settled: readers fail from then on.
	holds, busy int
	retired     bool
	recycled    bool
	// gen counts the buffer's uses: a reader of an earlier use, even one
	// never closed, reads nothing of a later one.
	gen uint64
}

// Pool classes: capacities of 2^k and 3*2^(k-1) bytes, from 2 KiB to the
// largest body (a pooled buffer wastes at most a third of itself).
const (
	minBodyClassBits = 11
	maxBodyClassBits = 25 // 32 MiB: past it, buffers are not pooled
)

var bodyPools [2 * (maxBodyClassBits - minBodyClassBits + 1)]sync.Pool

// bodyClass returns the pool class of a buffer of at least n bytes and its
// capacity, or -1 when n is too large to pool.
func bodyClass(n int) (class, size int) {
	k := max(bits.Len(uint(n-1)), minBodyClassBits) // 2^k >= n
	if k > maxBodyClassBits {
		return -1, n
	}
	i := 2 * (k - minBodyClassBits)
	if k > minBodyClassBits && n <= 3<<(k-2) {
		return i - 1, 3 << (k - 2)
	}
	return i, 1 << k
}

// newBodyBuf returns a buffer with room for headroom plus n bytes, from a
// pool when pooled. It holds the request's own hold.
func newBodyBuf(n int, pooled bool) *bodyBuf {
	need := bodyHeadroom + n
	if !pooled {
		return &bodyBuf{b: make([]byte, need), off: bodyHeadroom, class: -1, holds: 1}
	}
	class, size := bodyClass(need)
	if class >= 0 {
		if v := bodyPools[class].Get(); v != nil {
			bb := v.(*bodyBuf)
			bb.mu.Lock()
			bb.off, bb.holds, bb.busy, bb.retired, bb.recycled = bodyHeadroom, 1, 0, false, false
			bb.gen++
			bb.mu.Unlock()
			return bb
		}
	}
	return &bodyBuf{b: make([]byte, size), off: bodyHeadroom, class: class, holds: 1}
}

// errBodyTooLarge is readBody's answer to a body over its limit.
var errBodyTooLarge = errors.New("llmroute: request body too large")

// readBody reads r, of contentLength bytes when that is known (> 0), into
// a buffer; more than limit bytes is errBodyTooLarge. It returns the
// buffer (holding the request's hold) and the body in it.
func readBody(r io.Reader, contentLength, limit int64) (*bodyBuf, []byte, error) {
	hint := 512
	if contentLength > 0 {
		// + 512: the read that sees the end needs room too.
		hint = int(contentLength) + 512
	}
	bb := newBodyBuf(hint, contentLength >= pooledBodyMin)
	n := 0
	for {
		if bb.off+n == len(bb.b) {
			bb = bb.grow(n)
		}
		m, err := r.Read(bb.b[bb.off+n:])
		n += m
		if int64(n) > limit {
			bb.drop()
			return nil, nil, errBodyTooLarge
		}
		if err == io.EOF {
			return bb, bb.b[bb.off : bb.off+n], nil
		}
		if err != nil {
			bb.drop()
			return nil, nil, err
		}
	}
}

// grow returns a buffer twice as large holding the n body bytes read so
// far; bb goes back to its pool.
func (bb *bodyBuf) grow(n int) *bodyBuf {
	nb := newBodyBuf(2*(len(bb.b)-bb.off), n >= pooledBodyMin)
	copy(nb.b[nb.off:], bb.b[bb.off:bb.off+n])
	bb.drop()
	return nb
}

// reader returns a new reader over body, which lies in bb, holding bb
// until it is closed (or the request is settled).
func (bb *bodyBuf) reader(body []byte) io.ReadCloser {
	if bb == nil || bb.class < 0 {
		return io.NopCloser(bytes.NewReader(body))
	}
	return bb.readerInto(new(pooledReader), body)
}

// readerInto is reader for a pooled bb, set up in br (a zero
// pooledReader the caller provides, so that one living as long as the
// request costs no allocation of its own).
func (bb *bodyBuf) readerInto(br *pooledReader, body []byte) io.ReadCloser {
	bb.mu.Lock()
	bb.holds++
	gen := bb.gen
	bb.mu.Unlock()
	br.buf, br.gen = bb, gen
	br.r.Reset(body)
	return br
}

// drop gives back one hold (the request's own, or a reader's).
func (bb *bodyBuf) drop() {
	if bb == nil {
		return
	}
	bb.mu.Lock()
	bb.holds--
	bb.recycleLocked()
	bb.mu.Unlock()
}

// generation returns the buffer's current use, for retire.
func (bb *bodyBuf) generation() uint64 {
	if bb == nil {
		return 0
	}
	bb.mu.Lock()
	defer bb.mu.Unlock()
	return bb.gen
}

// retire cuts every reader of use gen off (the request is settled) and
// gives the buffer back once no Read is in progress. A buffer already
// back in its pool (the request let go at its first byte, its readers
// closed) may serve another request by then: that use is left alone.
func (bb *bodyBuf) retire(gen uint64) {
	if bb == nil {
		return
	}
	bb.mu.Lock()
	if bb.gen == gen {
		bb.retired = true
		bb.recycleLocked()
	}
	bb.mu.Unlock()
}

// recycleLocked puts a pooled buffer nothing may read back in its pool.
func (bb *bodyBuf) recycleLocked() {
	if bb.recycled || bb.class < 0 || bb.busy > 0 || (bb.holds > 0 && !bb.retired) {
		return
	}
	bb.recycled = true
	bodyPools[bb.class].Put(bb)
}

// errBodyGone is what a reader of a settled request's body reads.
var errBodyGone = errors.New("llmroute: request already settled")

// pooledReader is one reader of a pooled body. Its Reads hold the buffer
// while they copy; it has no WriteTo, so that nothing writes from the
// buffer outside a Read.
type pooledReader struct {
	buf    *bodyBuf
	gen    uint64 // the buffer's use it reads
	r      bytes.Reader
	closed bool // guarded by buf.mu
}

// Read reads from the body, or fails once the request is settled.
func (br *pooledReader) Read(p []byte) (int, error) {
	bb := br.buf
	bb.mu.Lock()
	if br.closed || bb.retired || br.gen != bb.gen {
		bb.mu.Unlock()
		return 0, errBodyGone
	}
	bb.busy++
	bb.mu.Unlock()
	n, err := br.r.Read(p)
	bb.mu.Lock()
	bb.busy--
	bb.recycleLocked()
	bb.mu.Unlock()
	return n, err
}

// Close gives back the reader's hold; it may be called more than once.
func (br *pooledReader) Close() error {
	bb := br.buf
	bb.mu.Lock()
	if !br.closed {
		br.closed = true
		if br.gen == bb.gen {
			bb.holds--
			bb.recycleLocked()
		}
	}
	bb.mu.Unlock()
	return nil
}

// Interface guards
var _ io.ReadCloser = (*pooledReader)(nil)
