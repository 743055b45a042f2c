package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
)

// dynPool returns new Upstream values for addrs, as a dynamic upstream
// source does on every attempt.
func dynPool(addrs ...string) reverseproxy.UpstreamPool {
	pool := make(reverseproxy.UpstreamPool, len(addrs))
	for i, a := range addrs {
		pool[i] = &reverseproxy.Upstream{Host: new(reverseproxy.Host), Dial: a}
	}
	return pool
}

// routedRequest returns a request carrying a fresh routing context.
func routedRequest(t *testing.T, ctx context.Context) (*http.Request, *routeCtx) {
	rc := newRouteCtx(time.Now(), nil, nil)
	vars := map[string]any{routeVarKey: rc}
	ctx = context.WithValue(ctx, caddyhttp.VarsCtxKey, vars)
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, caddy.NewReplacer())
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://test/v1/chat/completions", http.NoBody)
	require.NoError(t, err)
	return r, rc
}

// barePolicy returns a least_load policy with a cap of maxInFlight, set up
// without Caddy (no Provision): enough for Select on dynamic pools.
func barePolicy(t *testing.T, maxInFlight int) *LLMSelection {
	p := &LLMSelection{Strategy: "least_load", MaxInFlight: maxInFlight, QueueSize: 8, QueueTimeout: caddy.Duration(5 * time.Second),
		CooldownBase: caddy.Duration(time.Second), CooldownMax: caddy.Duration(time.Second), FailStatus: []int{},
		IndexBlocks: defaultIndexBlocks, logger: zap.NewNop(), clock: clockwork.NewFakeClock()}
	require.NoError(t, p.setup())
	return p
}

// selector runs p.Select for fresh routed requests and, when the test
// ends, finishes every one of them and drops p's replica references.
type selector struct {
	t   *testing.T
	p   *LLMSelection
	rcs []*routeCtx
}

func newSelector(t *testing.T, p *LLMSelection) *selector {
	s := &selector{t: t, p: p}
	t.Cleanup(func() {
		for _, rc := range s.rcs {
			rc.finish(neutralEnd)
		}
		p.states.Range(func(k, _ any) bool {
			releaseReplica(k.(string))
			return true
		})
	})
	return s
}

// sel selects for a new request with pool and returns the chosen replica
// ("" when none) and the request's routing context.
func (s *selector) sel(ctx context.Context, pool reverseproxy.UpstreamPool) (string, *routeCtx) {
	r, rc := routedRequest(s.t, ctx)
	up := s.p.Select(pool, r, nil)
	s.rcs = append(s.rcs, rc)
	if up == nil {
		return "", rc
	}
	return up.Dial, rc
}

// TestQueuedStalePoolKeepsJoiner proves that a request that queued with
// the upstream set of before a join (dynamic upstreams: its pool is as old
// as its wait) does not make the policy take the joiner for departed: the
// joiner keeps its state, its in-flight count and its index, so its cap
// (and slow start) still hold for the requests that see the new set. It
// also proves that such a request does not bring back, nor pick, a replica
// that left while it waited.
func TestQueuedStalePoolKeepsJoiner(t *testing.T) {
	p := barePolicy(t, 1)
	addr := func(i int) string { return fmt.Sprintf("departure-test.invalid:%d", 8000+i) }
	a, b, c, d := addr(0), addr(1), addr(2), addr(3)
	s := newSelector(t, p)
	on := map[string]*routeCtx{} // the request holding each replica's slot
	sel := func(ctx context.Context, pool reverseproxy.UpstreamPool) string {
		got, rc := s.sel(ctx, pool)
		if got != "" {
			on[got] = rc
		}
		return got
	}

	// Three replicas, each at its cap of 1.
	for range 3 {
		require.NotEmpty(t, sel(context.Background(), dynPool(a, b, c)))
	}
	require.Len(t, on, 3)
	// A request queues with that set.
	got := make(chan string, 1)
	go func() { got <- sel(context.Background(), dynPool(a, b, c)) }()
	waitFor(t, "a queued request", func() bool { return p.queued.Load() == 1 })
	// d joins: the next request sees it and takes its only slot.
	require.Equal(t, d, sel(context.Background(), dynPool(a, b, c, d)))
	v, ok := p.states.Load(d)
	require.True(t, ok)
	stD := v.(*replicaState)
	stD.belief.Index().Insert([]uint64{7, 8, 9})
	// a's slot frees: the queued request wakes with its old set.
	on[a].finish(succeeded)
	select {
	case addr := <-got:
		require.Equal(t, a, addr)
	case <-time.After(5 * time.Second):
		t.Fatal("the queued request was not admitted")
	}
	v, ok = p.states.Load(d)
	require.True(t, ok, "the joiner was taken for departed")
	assert.Same(t, stD, v.(*replicaState), "the joiner's state was replaced")
	assert.Equal(t, 1, stD.inFlightNow())
	assert.Equal(t, 3, stD.belief.Index().Len(), "the joiner's index was purged")
	// Every replica is at its cap, d included: a request with the new set
	// must wait, not find d empty.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	assert.Empty(t, sel(ctx, dynPool(a, b, c, d)), "the joiner went over its cap")

	// Now c leaves while a request waits with a set that still holds it.
	go func() { got <- sel(context.Background(), dynPool(a, b, c, d)) }()
	waitFor(t, "a queued request", func() bool { return p.queued.Load() == 1 })
	ctx2, cancel2 := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel2()
	assert.Empty(t, sel(ctx2, dynPool(a, b, d)), "nothing is free") // c departs here
	_, ok = p.states.Load(c)
	require.False(t, ok, "c should have departed")
	on[c].finish(succeeded) // c's request ends: the queued one wakes
	on[b].finish(succeeded) // then b's
	select {
	case addr := <-got:
		assert.Equal(t, b, addr, "a queued request picked a replica that left")
	case <-time.After(5 * time.Second):
		t.Fatal("the queued request was not admitted")
	}
	_, ok = p.states.Load(c)
	assert.False(t, ok, "a queued request brought back a replica that left")
}

// statusOf returns addr's entry in /llm_route/state, if listed.
func statusOf(addr string) (stateapi.Replica, bool) {
	for _, s := range snapshotReplicas() {
		if s.Addr == addr {
			return s, true
		}
	}
	return stateapi.Replica{}, false
}

// TestDepartedReplicaDrainsThenReturns proves that a replica that leaves
// the upstream set with requests in flight stays listed (draining, with
// its in-flight count) until they end, then disappears; and that when it
// comes back under the same address before they end, those requests still
// count against its cap and its slow start begins again.
func TestDepartedReplicaDrainsThenReturns(t *testing.T) {
	p := barePolicy(t, 2)
	a, b := "drain-test.invalid:8100", "drain-test.invalid:8101"
	sl := newSelector(t, p)
	sel := func(pool reverseproxy.UpstreamPool) (string, *routeCtx) { return sl.sel(context.Background(), pool) }

	// Two requests in flight on a, its cap.
	got1, rc1 := sel(dynPool(a))
	got2, rc2 := sel(dynPool(a))
	require.Equal(t, []string{a, a}, []string{got1, got2})
	v, ok := p.states.Load(a)
	require.True(t, ok)
	stA := v.(*replicaState)
	stA.belief.Index().Insert([]uint64{1, 2, 3})
	seen := stA.firstSeen

	// a leaves: it stays listed, draining, with both requests counted.
	got, rcB1 := sel(dynPool(b))
	require.Equal(t, b, got)
	_, ok = p.states.Load(a)
	require.False(t, ok, "a should have departed")
	s, ok := statusOf(a)
	require.True(t, ok, "a departed replica with requests in flight must stay listed")
	assert.True(t, s.Draining)
	assert.Equal(t, 2, s.InFlight)
	assert.Zero(t, s.IndexEntries, "a departed replica's index is purged")

	// a comes back while both still run: same state, still at its cap.
	p.clock.(*clockwork.FakeClock).Advance(5 * time.Millisecond)
	got, rcB2 := sel(dynPool(a, b))
	assert.Equal(t, b, got, "the returning replica went over its cap")
	v, ok = p.states.Load(a)
	require.True(t, ok)
	assert.Same(t, stA, v.(*replicaState))
	assert.True(t, stA.firstSeen.After(seen), "slow start did not begin again")
	s, _ = statusOf(a)
	assert.Equal(t, 2, s.InFlight)

	// Both end: a is no longer draining, and still listed (the policy uses it).
	rc1.finish(succeeded)
	rc2.finish(succeeded)
	s, ok = statusOf(a)
	require.True(t, ok)
	assert.False(t, s.Draining)
	assert.Zero(t, s.InFlight)

	// a leaves again with nothing in flight: gone at once. Then a request
	// in flight on b when b leaves: listed until it ends, then gone.
	rcB1.finish(succeeded)
	rcB2.finish(succeeded)
	got, _ = sel(dynPool(b)) // a departs, with nothing in flight
	require.Equal(t, b, got)
	_, ok = statusOf(a)
	assert.False(t, ok, "a departed idle replica must leave /llm_route/state")
	got, _ = sel(dynPool(a)) // b departs with one request in flight, a rejoins
	require.Equal(t, a, got)
	s, ok = statusOf(b)
	require.True(t, ok)
	assert.True(t, s.Draining)
	for _, rc := range sl.rcs {
		rc.finish(succeeded)
	}
	_, ok = statusOf(b)
	assert.False(t, ok, "a drained replica must leave /llm_route/state (its state leaked)")
}
