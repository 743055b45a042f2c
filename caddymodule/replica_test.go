package caddymodule

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestReserveCapIsAtomic proves tryReserve never exceeds the cap under
// concurrent callers and release runs once per reservation.
func TestReserveCapIsAtomic(t *testing.T) {
	st := &replicaState{addr: "test-cap", index: policies.NewIndex(10)}
	now := time.Now()
	var mu sync.Mutex
	var got []*reservation
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, ok := st.tryReserve(now, 4); ok {
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, got, 4)
	cd := cooldownConfig{base: time.Second, max: time.Second}
	for _, r := range got {
		r.release(outcomeSuccess, "", 0, cd)
		r.release(outcomeSuccess, "", 0, cd) // second release is a no-op
	}
	assert.Equal(t, 0, st.inFlightNow())
}

// TestBackoffIsCappedExponential proves the cooldown doubles per failure,
// honours Retry-After and never exceeds the cap.
func TestBackoffIsCappedExponential(t *testing.T) {
	st := &replicaState{addr: "test-backoff", index: policies.NewIndex(10)}
	cd := cooldownConfig{base: 100 * time.Millisecond, max: time.Second}
	now := time.Now()
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	st.mu.Lock()
	defer st.mu.Unlock()
	for i, w := range want {
		st.coolUntil = time.Time{}
		st.failLocked(now, "5xx", 0, cd)
		assert.Equal(t, w*time.Millisecond, st.coolUntil.Sub(now), "failure %d", i+1)
	}
	st.coolUntil, st.failures = time.Time{}, 0
	st.failLocked(now, "429", 700*time.Millisecond, cd)
	assert.Equal(t, 700*time.Millisecond, st.coolUntil.Sub(now), "Retry-After honoured")
	st.coolUntil = time.Time{}
	st.failLocked(now, "429", time.Hour, cd)
	assert.Equal(t, time.Second, st.coolUntil.Sub(now), "Retry-After capped")
	st.wakeTimer.Stop()
}

// TestWaitListFIFO proves waiters are woken in arrival order, only for the
// replicas they may use, and that an unused signal is passed on.
func TestWaitListFIFO(t *testing.T) {
	wl := &waitList{}
	a := wl.add(map[string]struct{}{"x": {}})
	b := wl.add(map[string]struct{}{"y": {}})
	c := wl.add(nil)
	wl.wake("y")
	assert.Len(t, b.ch, 1, "only b may use y")
	assert.Len(t, a.ch, 0)
	wl.wake("x")
	assert.Len(t, a.ch, 1)
	wl.wake("x")
	assert.Len(t, c.ch, 1, "a already signalled: next eligible is c")
	<-c.ch
	wl.remove(a) // a leaves with a pending signal: it goes to c
	assert.Len(t, c.ch, 1)
	wl.remove(b)
	wl.remove(c)
	assert.Equal(t, 0, wl.len())
}

// inFlightNow returns the replica's reservation count (for tests).
func (s *replicaState) inFlightNow() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inFlight
}

// engineView is the engine part of snapshot, read under the lock (for
// tests).
func (s *replicaState) engineView(now time.Time) (waiting, running int, kv float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.engineViewLocked(now)
}
