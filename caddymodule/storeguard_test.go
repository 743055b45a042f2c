package caddymodule

import (
	"bufio"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileStore answers the client's handshake as an old server does
// (HELLO unknown), then answers every other command with reply followed
// by fill repeated until the client hangs up. sent counts what it wrote.
func hostileStore(t *testing.T, reply, fill string) (url string, sent *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	sent = new(atomic.Int64)
	chunk := []byte(strings.Repeat(fill, (64<<10)/max(1, len(fill))))
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					args, err := readCommand(r)
					if err != nil {
						return
					}
					if strings.EqualFold(args[0], "HELLO") {
						c.Write([]byte("-ERR unknown command\r\n"))
						continue
					}
					n, err := c.Write([]byte(reply))
					sent.Add(int64(n))
					for err == nil && len(fill) > 0 && sent.Load() < 8<<30 {
						n, err = c.Write(chunk)
						sent.Add(int64(n))
					}
					return
				}
			}()
		}
	}()
	return "redis://" + ln.Addr().String(), sent
}

// readCommand reads one RESP command (an array of bulk strings).
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 || n > 64 {
		return nil, io.ErrUnexpectedEOF
	}
	args := make([]string, n)
	for i := range args {
		l, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		k, _ := strconv.Atoi(strings.TrimSpace(l[1:]))
		buf := make([]byte, k+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:k])
	}
	return args, nil
}

// TestStoreBoundsHostileReplies proves a store that answers a claim with
// an endless line, or announces a huge bulk string or array, fails the
// claim quickly (long before the timeout) with the gateway's memory
// bounded, instead of the client reading or allocating without bound.
func TestStoreBoundsHostileReplies(t *testing.T) {
	const timeout = 3 * time.Second
	accepted := 0
	for _, tt := range []struct{ name, reply, fill string }{
		{"endless status line", "+", "a"},
		{"endless error line", "-ERR ", "x"},
		{"endless length header", "$", "9"},
		{"huge bulk string", "$1099511627776\r\n", "a"},
		{"huge array", "*1000000000\r\n", ":1\r\n"},
		{"huge nested arrays", "*1\r\n*1\r\n*100000000\r\n", "$1\r\na\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			url, sent := hostileStore(t, tt.reply, tt.fill)
			d, err := newRedisHomes(HomesDirectoryConfig{URL: url, KeyPrefix: "t:", TTL: caddy.Duration(time.Minute),
				Timeout: caddy.Duration(timeout)}, nil)
			require.NoError(t, err)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, ok := d.Claim(1, "r1:1")
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%s: failed in %v, %d KiB allocated, store sent %d KiB", tt.name, took, alloc>>10, sent.Load()>>10)
			assert.False(t, ok, "the claim fails")
			assert.Less(t, took, timeout/2, "it fails on the bound, not on the timeout")
			assert.Less(t, alloc, uint64(16<<20), "memory stays bounded")
			accepted++
		})
	}
	assert.Equal(t, 6, accepted)
}

// TestGuardedConnFraming proves the guard passes well-formed replies of
// every RESP type, split at every byte, and refuses what passes a bound.
func TestGuardedConnFraming(t *testing.T) {
	ok := "+OK\r\n:12\r\n$5\r\nhe\r\no\r\n$-1\r\n*-1\r\n_\r\n*2\r\n$1\r\na\r\n%1\r\n+k\r\n=7\r\ntxt:abc\r\n" +
		"#t\r\n,1.5\r\n(123\r\n!3\r\nERR\r\n~1\r\n:1\r\n>2\r\n+a\r\n+b\r\n|1\r\n+k\r\n+v\r\n-ERR no\r\n"
	passed := 0
	for split := 1; split <= len(ok); split++ {
		g := &guardedConn{window: maxReplyWindow}
		for i := 0; i < len(ok); i += split {
			require.NoError(t, g.follow([]byte(ok[i:min(i+split, len(ok))])), "split %d", split)
		}
		assert.False(t, g.inLine, "split %d: ends between replies", split)
		assert.Zero(t, g.payload, "split %d", split)
		passed++
	}
	assert.Equal(t, len(ok), passed)
	for _, bad := range []string{
		"+" + strings.Repeat("a", maxReplyLine+1),
		"$" + strconv.Itoa(maxReplyWindow+1) + "\r\n",
		"*" + strconv.Itoa(maxReplyElems+1) + "\r\n",
		"%99999999999999999999\r\n",
	} {
		g := &guardedConn{window: maxReplyWindow}
		assert.ErrorIs(t, g.follow([]byte(bad)), errReplyTooLarge, "%.20q", bad)
	}
}

// FuzzGuardedConnFraming checks the guard's framing does not depend on
// how the reads split the bytes: fed at once or a byte at a time, the
// same input ends in the same state and the same verdict.
func FuzzGuardedConnFraming(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "$5\r\nhello\r\n*2\r\n:1\r\n$-1\r\n", "%1\r\n+k\r\n=7\r\ntxt:abc\r\n", "$99999999999\r\n", "+" + strings.Repeat("a", 100)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		whole := &guardedConn{window: maxReplyWindow}
		errWhole := whole.follow(b)
		bytewise := &guardedConn{window: maxReplyWindow}
		var errBytes error
		for i := range b {
			if errBytes = bytewise.follow(b[i : i+1]); errBytes != nil {
				break
			}
		}
		if (errWhole == nil) != (errBytes == nil) {
			t.Fatalf("verdicts differ: %v vs %v", errWhole, errBytes)
		}
		if errWhole == nil && (whole.payload != bytewise.payload || whole.inLine != bytewise.inLine || whole.num != bytewise.num) {
			t.Fatalf("states differ: %+v vs %+v", whole, bytewise)
		}
	})
}
