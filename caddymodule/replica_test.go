package caddymodule

import (
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestReserveCapIsAtomic proves reserve never exceeds the cap under
// concurrent callers and an attempt ends once.
func TestReserveCapIsAtomic(t *testing.T) {
	st := testReplica("test-cap", 10)
	now := time.Now()
	rules := &attemptRules{cd: cooldownConfig{base: time.Second, max: time.Second}}
	var mu sync.Mutex
	var got []*attempt
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, ok := st.reserve(now, 4, rules); ok {
				mu.Lock()
				got = append(got, r)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, got, 4)
	for _, r := range got {
		r.end(succeeded)
		r.end(succeeded) // a second end is a no-op
	}
	assert.Equal(t, 0, st.inFlightNow())
}

// TestBackoffIsCappedExponential proves the cooldown doubles per failure,
// honours Retry-After and never exceeds the cap.
func TestBackoffIsCappedExponential(t *testing.T) {
	st := testReplica("test-backoff", 10)
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
	waiting, running, kv, _ = s.engine.view(now)
	return waiting, running, kv
}

// testReplica returns a replica state outside the package's pool, on the
// real clock, whose index holds capacity blocks.
func testReplica(addr string, capacity int) *replicaState {
	st := newReplicaState(addr, clockwork.NewRealClock())
	st.belief = policies.NewBelief(capacity)
	return st
}

// TestDialTimeoutsCoolOnlyWhenTheyRepeat proves the dial-timeout rule: the
// timeouts of a burst of overlapping dials count once, a connection ends
// the streak, and dialFails timeouts of dials made one after another cool
// the replica (reason dial_timeout) while a refused connection
// ("transport") cools it at once.
func TestDialTimeoutsCoolOnlyWhenTheyRepeat(t *testing.T) {
	cd := cooldownConfig{base: time.Minute, max: time.Minute, dialFails: 3, dialWindow: 10 * time.Second}
	clk := clockwork.NewFakeClock()
	cooling := func(st *replicaState) bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return clk.Now().Before(st.coolUntil)
	}
	// timeoutRound reserves n slots at once and fails them all by dial
	// timeout, as a burst does.
	timeoutRound := func(st *replicaState, n int) {
		var rs []*attempt
		for range n {
			r, ok := st.reserve(clk.Now(), 0, &attemptRules{cd: cd})
			require.True(t, ok)
			rs = append(rs, r)
		}
		clk.Advance(2 * time.Millisecond) // the timeouts come after the dials began
		for _, r := range rs {
			r.end(failed(reasonDialTimeout, 0))
		}
		clk.Advance(2 * time.Millisecond)
	}

	st := newReplicaState("test-dial-burst", clk)
	t.Cleanup(func() { _ = st.Destruct() })
	timeoutRound(st, 20)
	assert.False(t, cooling(st), "a burst of overlapping dial timeouts is one event")
	timeoutRound(st, 5)
	assert.False(t, cooling(st), "two rounds are below dial_timeout_fails 3")
	st.connected()
	timeoutRound(st, 1)
	timeoutRound(st, 1)
	assert.False(t, cooling(st), "a connection ended the streak")
	timeoutRound(st, 1)
	require.True(t, cooling(st), "three rounds of dial timeouts in a row cool the replica")
	assert.Equal(t, reasonDialTimeout, st.coolReason)
	assert.Equal(t, 0, st.inFlightNow())

	// An old streak is forgotten after the window.
	short := cd
	short.dialWindow = 20 * time.Millisecond
	st2 := newReplicaState("test-dial-window", clk)
	t.Cleanup(func() { _ = st2.Destruct() })
	cd = short
	timeoutRound(st2, 1)
	timeoutRound(st2, 1)
	clk.Advance(40 * time.Millisecond)
	timeoutRound(st2, 1)
	assert.False(t, cooling(st2), "timeouts further apart than the window do not add up")

	// A refused connection cools at once; dial_timeout_fails 1 makes a
	// dial timeout do the same.
	st3 := newReplicaState("test-refused", clk)
	t.Cleanup(func() { _ = st3.Destruct() })
	r, ok := st3.reserve(clk.Now(), 0, &attemptRules{cd: cd})
	require.True(t, ok)
	r.end(failed("transport", 0))
	assert.True(t, cooling(st3), "a refused connection cools at once")
	st4 := newReplicaState("test-dial-one", clk)
	t.Cleanup(func() { _ = st4.Destruct() })
	cd.dialFails = 1
	timeoutRound(st4, 1)
	assert.True(t, cooling(st4), "dial_timeout_fails 1 cools at the first dial timeout")
}
