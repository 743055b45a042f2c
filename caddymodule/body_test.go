package caddymodule

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadBody proves the body is read whole, with or without a length,
// through short reads, into a buffer with room before it, and that a body
// over the limit is refused.
func TestReadBody(t *testing.T) {
	for _, n := range []int{0, 10, pooledBodyMin - 1, pooledBodyMin, 100 << 10} {
		want := bytes.Repeat([]byte("x"), n)
		for _, cl := range []int64{int64(n), -1} {
			bb, body, err := readBody(iotest.HalfReader(bytes.NewReader(want)), cl, 1<<20)
			require.NoError(t, err)
			assert.Equal(t, want, body, "n=%d cl=%d", n, cl)
			assert.GreaterOrEqual(t, bb.off, bodyHeadroom)
			assert.Equal(t, n >= pooledBodyMin, bb.class >= 0, "pooled from pooledBodyMin on")
		}
	}
	_, _, err := readBody(strings.NewReader(strings.Repeat("x", 101)), -1, 100)
	assert.ErrorIs(t, err, errBodyTooLarge)
	_, _, err = readBody(iotest.ErrReader(io.ErrUnexpectedEOF), -1, 100)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

// TestBodyClass proves every class holds what it is asked for and wastes
// at most a third.
func TestBodyClass(t *testing.T) {
	for n := 1; n <= 1<<maxBodyClassBits; n += 1 + n/7 {
		class, size := bodyClass(n)
		require.GreaterOrEqual(t, size, n)
		if n > 1<<minBodyClassBits {
			assert.LessOrEqual(t, size, n*3/2+1, "n=%d", n)
		}
		require.Less(t, class, len(bodyPools))
	}
	class, _ := bodyClass(1<<maxBodyClassBits + 1)
	assert.Equal(t, -1, class)
}

// TestPooledBodyLifecycle proves a pooled buffer goes back only when the
// request let go and every reader is closed or cut off, that a reader of
// a settled request reads nothing, and that a reader left over from an
// earlier use of the buffer never reads a later request's body.
func TestPooledBodyLifecycle(t *testing.T) {
	in := []byte(`{"x":"` + strings.Repeat("a", 8<<10) + `"}`)
	bb, b, err := readBody(bytes.NewReader(in), int64(len(in)), 1<<20)
	require.NoError(t, err)
	require.GreaterOrEqual(t, bb.class, 0)
	body, ok := withIncludeUsage(bb, b) // moves the body's start into the room
	require.True(t, ok)
	body = bytes.Clone(body)
	r1, r2 := bb.reader(bb.b[bb.off:bb.off+len(body)]), bb.reader(bb.b[bb.off:bb.off+len(body)])
	bb.drop() // the request lets go
	assert.False(t, bb.recycled, "readers still hold it")
	got, err := io.ReadAll(r1)
	require.NoError(t, err)
	assert.Equal(t, body, got)
	require.NoError(t, r1.Close())
	require.NoError(t, r1.Close(), "a second close is harmless")
	assert.False(t, bb.recycled, "r2 still holds it")
	bb.retire(bb.generation())
	assert.True(t, bb.recycled, "settled: r2 is cut off")
	_, err = r2.Read(make([]byte, 10))
	assert.ErrorIs(t, err, errBodyGone)

	// The next use of the same buffer: r2 and r1 read nothing of it.
	gen := bb.gen
	bb2 := newBodyBuf(8<<10+512, true)
	if bb2 == bb {
		assert.Equal(t, gen+1, bb2.gen)
		assert.Equal(t, bodyHeadroom, bb2.off, "the room is back")
		copy(bb2.b[bb2.off:], "secret")
		_, err = r2.Read(make([]byte, 10))
		assert.ErrorIs(t, err, errBodyGone)
		require.NoError(t, r2.Close())
		assert.Equal(t, 1, bb2.holds, "a stale reader's close takes no hold of the new use")
	}
	bb2.retire(bb2.generation())
}

// TestPooledBodyReadInProgress proves the buffer is not reused while a Read
// copies from it, even when the request is settled meanwhile, with the
// race detector watching the copies.
func TestPooledBodyReadInProgress(t *testing.T) {
	body := bytes.Repeat([]byte("b"), 64<<10)
	for range 50 {
		bb, b, err := readBody(bytes.NewReader(body), int64(len(body)), 1<<20)
		require.NoError(t, err)
		r := bb.reader(b)
		bb.drop()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := make([]byte, 1024)
			for {
				if _, err := r.Read(p); err != nil {
					return
				}
			}
		}()
		bb.retire(bb.generation())
		// A new request may take the buffer now; it writes its body.
		nb := newBodyBuf(len(body)+512, true)
		copy(nb.b[nb.off:], body)
		wg.Wait()
		nb.retire(nb.generation())
	}
}

// TestRouteCtxReleasesBody proves the request's buffer goes back at the
// first byte of an answer once the attempt's reader is closed (as the
// transport closes it once it sent the body), not when the stream ends.
func TestRouteCtxReleasesBody(t *testing.T) {
	body := bytes.Repeat([]byte("c"), 16<<10)
	bb, b, err := readBody(bytes.NewReader(body), int64(len(body)), 1<<20)
	require.NoError(t, err)
	rc := newRouteCtx(tenantClock.Now(), nil, b)
	own := rc.holdBody(bb)
	st := testReplica("test-body-release", 4)
	a, ok := st.reserve(tenantClock.Now(), 4, &attemptRules{})
	require.True(t, ok)
	require.True(t, rc.begin(a))
	ar, n, ok := rc.attemptBody()
	require.True(t, ok)
	assert.Equal(t, int64(len(body)), n)
	got, err := io.ReadAll(ar)
	require.NoError(t, err)
	assert.Equal(t, body, got)
	require.NoError(t, ar.Close())
	assert.False(t, bb.recycled)
	rc.firstByte()
	assert.True(t, bb.recycled, "given back at the first byte")
	_, err = own.Read(make([]byte, 1))
	assert.ErrorIs(t, err, errBodyGone)

	// The buffer serves the next request before this one is settled:
	// settling this one leaves the next one's body alone.
	next := newBodyBuf(len(body)+512, true)
	nr := next.reader(next.b[next.off : next.off+len(body)])
	rc.finish(succeeded)
	if next == bb {
		_, err = nr.Read(make([]byte, 10))
		assert.NoError(t, err, "the next request's reader still reads")
		assert.False(t, next.recycled)
	}
	_ = nr.Close()
	next.retire(next.generation())
}
