package caddymodule

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatusFailuresCoolOnlyWhenTheyRepeat proves the fail_status rule:
// status_fails distinct requests in a row cool the replica, the same
// request again counts once, a success ends the streak, a forgiven
// request leaves it, and status_fails 1 cools at the first.
func TestStatusFailuresCoolOnlyWhenTheyRepeat(t *testing.T) {
	type step struct {
		id      uint64 // 0: a success
		forgive bool   // take id out of the streak instead
	}
	for _, tt := range []struct {
		name  string
		fails int
		steps []step
		cool  int // index of the step that cools, -1 none
	}{
		{"three distinct", 3, []step{{id: 1}, {id: 2}, {id: 3}}, 2},
		{"two are not enough", 3, []step{{id: 1}, {id: 2}}, -1},
		{"the same input counts once", 3, []step{{id: 1}, {id: 1}, {id: 1}, {id: 1}, {id: 2}}, -1},
		{"a success ends the streak", 3, []step{{id: 1}, {id: 2}, {}, {id: 3}, {id: 4}}, -1},
		{"a forgiven request leaves it", 3, []step{{id: 1}, {id: 2}, {id: 2, forgive: true}, {id: 3}}, -1},
		{"forgiven, then enough others", 3, []step{{id: 1}, {id: 2}, {id: 2, forgive: true}, {id: 3}, {id: 4}}, 4},
		{"status_fails 1", 1, []step{{id: 7}}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk := clockwork.NewFakeClock()
			st := newReplicaState("test-status-"+tt.name, clk)
			t.Cleanup(func() { _ = st.Destruct() })
			rules := &attemptRules{cd: cooldownConfig{base: time.Minute, max: time.Minute, statusFails: tt.fails}}
			got := -1
			for i, s := range tt.steps {
				if s.forgive {
					st.forgiveStatusFail(s.id)
					continue
				}
				a, ok := st.reserve(clk.Now(), 0, rules)
				require.True(t, ok, "step %d: the replica must still take requests", i)
				if s.id == 0 {
					a.end(succeeded)
					continue
				}
				o := failed(reasonStatus, 0)
				o.status, o.reqID = 500, s.id
				a.end(o)
				if st.coolingAt(clk.Now()) && got < 0 {
					got = i
				}
			}
			assert.Equal(t, tt.cool, got)
			assert.Zero(t, st.inFlightNow())
		})
	}
}

// coolingAt reports whether the replica is cooling at now (for tests).
func (s *replicaState) coolingAt(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Before(s.coolUntil)
}

// TestProbeStatusFailureCoolsAtOnce proves that a probe answered with a
// fail_status cools the replica again without waiting for a streak.
func TestProbeStatusFailureCoolsAtOnce(t *testing.T) {
	clk := clockwork.NewFakeClock()
	st := newReplicaState("test-probe-status", clk)
	t.Cleanup(func() { _ = st.Destruct() })
	rules := &attemptRules{cd: cooldownConfig{base: time.Second, max: time.Minute, statusFails: 3}}
	st.mu.Lock()
	st.failLocked(clk.Now(), reasonStatus, 0, rules.cd)
	st.unlock()
	clk.Advance(2 * time.Second)
	a, ok := st.reserve(clk.Now(), 0, rules)
	require.True(t, ok)
	require.True(t, a.probe)
	o := failed(reasonStatus, 0)
	o.status, o.reqID = 500, 42
	a.end(o)
	assert.True(t, st.coolingAt(clk.Now()), "a failed probe must cool the replica again")
}

// TestJudgeBlamesTheRequest proves that a request that gets the same
// fail_status from a second replica is at fault: its second failure is
// neutral and the first replica forgets it.
func TestJudgeBlamesTheRequest(t *testing.T) {
	clk := clockwork.NewFakeClock()
	a, b := newReplicaState("test-judge-a", clk), newReplicaState("test-judge-b", clk)
	t.Cleanup(func() { _, _ = a.Destruct(), b.Destruct() })
	rules := &attemptRules{cd: cooldownConfig{base: time.Minute, max: time.Minute, statusFails: 2}}
	fail500 := outcome{kind: outcomeFailure, reason: reasonStatus, status: 500}

	// Another request failed on a: one more distinct failure would cool it.
	other, _ := a.reserve(clk.Now(), 0, rules)
	o := fail500
	o.reqID = 99
	other.end(o)

	rc := newRouteCtx(clk.Now(), nil, []byte(`{"model":"m","poison":true}`))
	first, _ := a.reserve(clk.Now(), 0, rules)
	require.True(t, rc.begin(first))
	rc.endCurrent(fail500) // counted on a: cools it (two distinct)
	a.mu.Lock()
	a.coolUntil = time.Time{} // let a serve again for the check below
	a.unlock()

	second, _ := b.reserve(clk.Now(), 0, rules)
	require.True(t, rc.begin(second))
	rc.finish(fail500)
	b.mu.Lock()
	assert.Empty(t, b.statusFails, "the request's second identical failure must not count on b")
	b.mu.Unlock()

	// A 502 from a third replica is another failure, not the same one.
	rc2 := newRouteCtx(clk.Now(), nil, []byte(`{"model":"m","n":2}`))
	c := newReplicaState("test-judge-c", clk)
	t.Cleanup(func() { _ = c.Destruct() })
	x, _ := b.reserve(clk.Now(), 0, rules)
	require.True(t, rc2.begin(x))
	rc2.endCurrent(fail500)
	y, _ := c.reserve(clk.Now(), 0, rules)
	require.True(t, rc2.begin(y))
	o502 := fail500
	o502.status = 502
	rc2.finish(o502)
	c.mu.Lock()
	assert.Len(t, c.statusFails, 1, "a different status is the replica's own failure")
	c.mu.Unlock()
}

// TestRequestIDIsTheBody proves that the same body has the same identity
// and that requests without one are each distinct.
func TestRequestIDIsTheBody(t *testing.T) {
	now := time.Now()
	a := newRouteCtx(now, nil, []byte(`{"x":1}`)).requestID()
	b := newRouteCtx(now, nil, []byte(`{"x":1}`)).requestID()
	c := newRouteCtx(now, nil, []byte(`{"x":2}`)).requestID()
	d := newRouteCtx(now, nil, nil).requestID()
	e := newRouteCtx(now, nil, nil).requestID()
	assert.Equal(t, a, b)
	assert.NotEqual(t, a, c)
	assert.NotEqual(t, d, e)
	assert.NotZero(t, d)
}

// TestRefusalReason proves the refusal: none while a replica is up, 429
// when every replica is down after a 429, 503 otherwise.
func TestRefusalReason(t *testing.T) {
	for _, tt := range []struct {
		res  selectResult
		want rejectReason
	}{
		{selectResult{total: 2, cooling: 1, limited: 1}, rejectNone},
		{selectResult{total: 2, cooling: 2, limited: 2}, rejectRateLimited},
		{selectResult{total: 2, cooling: 2, limited: 1}, rejectNoHealthy},
		{selectResult{total: 2, cooling: 2}, rejectNoHealthy},
	} {
		assert.Equal(t, tt.want, tt.res.refusal(), "%+v", tt.res)
	}
}
