//go:build linux

package integration

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// blackholeAddr returns a loopback address where connects time out: a
// listener with backlog 1 that never accepts, its accept queue filled by
// the test's own connections, so that the kernel drops further SYNs (as
// for a replica whose accept queue overflows under a burst of new
// connections). It is closed when the test ends.
func blackholeAddr(t *testing.T) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Close(fd) })
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 1))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
	// Fill the accept queue (backlog+1 on Linux) until a connect times
	// out: from then on, every SYN is dropped.
	for i := 0; ; i++ {
		require.Less(t, i, 16, "connects to %s never started to time out", addr)
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
			continue
		}
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "connect to the full queue: %v", err)
		break
	}
	return addr
}

// TestDialTimeoutBurst proves that dial timeouts are a softer failure than
// a refused connection. A burst of concurrent requests meets a replica
// whose connects time out (accept queue full): each request is retried on
// the healthy replica and served (or queued), none gets 503, and the
// burst's overlapping timeouts count as one, so the replica does not cool.
// Dial timeouts that repeat one after another (three by default) do cool
// it (reason dial_timeout), so that an unreachable replica stops costing
// every request a dial timeout. A refused connection still cools at once
// (TestConnectionRefused).
func TestDialTimeoutBurst(t *testing.T) {
	cfg := baseConfig()
	cfg.DialTimeout = 300 * time.Millisecond
	cfg.CooldownBase, cfg.CooldownMax = 5*time.Second, 10*time.Second
	cfg.MaxInFlight, cfg.QueueSize, cfg.QueueTimeout = 4, 32, 10*time.Second
	hole := blackholeAddr(t)
	e := newEnv(t, 1, []string{hole}, cfg)
	live := e.rep(0).Addr()

	const n = 12
	results := make([]*result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = e.do(newID(t), chatBody(i%2 == 0, false, fmt.Sprintf("burst %d", i)), nil)
		}()
	}
	close(start)
	wg.Wait()
	served := 0
	for i, r := range results {
		require.NoError(t, r.Err, "request %d", i)
		if r.Status == http.StatusTooManyRequests {
			requireAPIError(t, r, http.StatusTooManyRequests, "")
			assert.GreaterOrEqual(t, retryAfter(r), 1, "429 must carry Retry-After")
			continue
		}
		require.Equal(t, http.StatusOK, r.Status, "request %d: a dial timeout must not end in an error: %s", i, r.Body)
		require.NoError(t, r.ReadErr)
		assert.Equal(t, live, r.Header.Get(replicaHdr))
		served++
	}
	assert.Equal(t, n, served, "with a 10s queue timeout every request of the burst is served")
	rs := e.replicaState(hole)
	assert.False(t, rs.Cooling, "one burst of overlapping dial timeouts must not cool the replica: %+v", rs)
	assert.Zero(t, rs.Failures, "%+v", rs)

	// One after another, the dial timeouts repeat: the replica cools. Each
	// request is still served by the live replica; round_robin sends every
	// other one to the black hole first.
	for i := 0; ; i++ {
		require.Less(t, i, 12, "the black hole never cooled after repeated dial timeouts: %+v", e.replicaState(hole))
		r := e.do(newID(t), chatBody(false, false, fmt.Sprintf("one at a time %d", i)), nil)
		require.NoError(t, r.Err)
		require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
		assert.Equal(t, live, r.Header.Get(replicaHdr))
		if rs := e.replicaState(hole); rs.Cooling {
			assert.Equal(t, "dial_timeout", rs.CoolReason)
			// The burst counted once, so two more timeouts made three;
			// round_robin alternates, so that took at most 5 requests.
			assert.LessOrEqual(t, i, 5, "cooled only after %d sequential requests", i+1)
			break
		}
	}
	// Cooling, the black hole costs nobody a dial timeout.
	began := time.Now()
	r := e.do(newID(t), chatBody(false, false, "after the cooldown began"), nil)
	require.Equal(t, http.StatusOK, r.Status, "body: %s", r.Body)
	assert.Less(t, time.Since(began), cfg.DialTimeout, "a cooling replica must not be dialled")
}
