package caddymodule

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/redisproc"
	"github.com/llmroute/caddy-llmroute/policies"
)

// redisServer is a real Valkey or Redis server on 127.0.0.1 that a test
// can stop and start again on the same port.
type redisServer struct {
	t *testing.T
	*redisproc.Server
}

// startRedis starts a server, or skips the test when none is installed
// (apt-get install redis-server).
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	return &redisServer{t: t, Server: redisproc.ForTest(t)}
}

func (s *redisServer) addr() string { return s.Addr() }
func (s *redisServer) url() string  { return s.URL() }
func (s *redisServer) start()       { require.NoError(s.t, s.Start()) }
func (s *redisServer) stop()        { s.Stop() }

// openTestStore opens a shared store as instance id, closed when the
// test ends.
func openTestStore(t *testing.T, url, prefix, id string, timeout time.Duration) *sharedStore {
	t.Helper()
	s, err := openSharedStore(storeAddr{url: url, timeout: timeout}, prefix, id, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Destruct() })
	return s
}

// TestSharedPins proves a response pin written by one instance is read by
// another that never saw the response (one round trip), and kept locally.
func TestSharedPins(t *testing.T) {
	srv := startRedis(t)
	a := openTestStore(t, srv.url(), "pins:", "a", time.Second)
	b := openTestStore(t, srv.url(), "pins:", "b", time.Second)
	found := 0
	for i := range 100 {
		id := fmt.Sprintf("resp_shared_%d", i)
		addr := fmt.Sprintf("10.0.0.%d:8000", i%4+1)
		a.sharePin(addr, id, &policies.Request{Conversation: fmt.Sprintf("conv_%d", i)})
		stateHomes.Remove(stateKey(stateResponse, id)) // b's instance never saw it
		got, key := b.pinOf(&policies.Request{PreviousResponseID: id})
		if got == addr && key == stateKey(stateResponse, id) {
			found++
		}
		local, ok := stateHomes.Get(stateKey(stateResponse, id))
		assert.True(t, ok && local == addr, "kept locally")
		stateHomes.Remove(stateKey(stateConversation, fmt.Sprintf("conv_%d", i)))
		got, _ = b.pinOf(&policies.Request{Conversation: fmt.Sprintf("conv_%d", i)})
		assert.Equal(t, addr, got, "the conversation too")
	}
	assert.Equal(t, 100, found)
	got, _ := b.pinOf(&policies.Request{PreviousResponseID: "resp_unknown"})
	assert.Empty(t, got, "an id nobody made")
}

// TestSharedBudgets proves requests_per_minute is one budget across
// instances: 6 a minute through two handlers sharing the store admit 6,
// whichever receives them, and a request refused before it was sent is
// given back.
func TestSharedBudgets(t *testing.T) {
	srv := startRedis(t)
	accepted := 0
	for _, tt := range []struct {
		name string
		rpm  int
	}{{"six", 6}, {"one", 1}, {"forty", 40}} {
		t.Run(tt.name, func(t *testing.T) {
			prefix := "budgets-" + tt.name + ":"
			var hs [2]*LLMRoute
			for i := range hs {
				hs[i] = &LLMRoute{shared: openTestStore(t, srv.url(), prefix, fmt.Sprint(i), time.Second)}
			}
			// Tenant states are per process: one for both handlers, whose
			// local buckets the shared decisions do not touch.
			h := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{"sb-" + tt.name: {Keys: []string{"sk-sb-" + tt.name}, RequestsPerMinute: tt.rpm}}}, tenantClock)
			ts := h.tenants[1]
			lim := ts.limits()
			var admitted, refused atomic.Int32
			var wg sync.WaitGroup
			for i := range 3 * tt.rpm {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tk, why, wait := hs[i%2].reserveTenant(ts, lim, 0, false)
					if tk == nil {
						assert.Equal(t, reasonRPM, why)
						assert.Greater(t, wait, time.Duration(0))
						refused.Add(1)
						return
					}
					assert.True(t, tk.shared)
					admitted.Add(1)
					hs[i%2].settleShared(tk, true, 0)
				}()
			}
			wg.Wait()
			assert.Equal(t, int32(tt.rpm), admitted.Load(), "the limit, across both")
			assert.Equal(t, int32(2*tt.rpm), refused.Load())
			accepted++
		})
	}
	assert.Equal(t, 3, accepted)
}

// TestSharedBudgetsGiveBack: a request admitted and not sent (the queue
// refused it) is given back to the shared budget.
func TestSharedBudgetsGiveBack(t *testing.T) {
	srv := startRedis(t)
	h := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{"gb": {Keys: []string{"sk-gb"}, RequestsPerMinute: 2, TokensPerMinute: 1000}}}, tenantClock)
	h.shared = openTestStore(t, srv.url(), "gb:", "a", time.Second)
	ts := h.tenants[1]
	lim := ts.limits()
	tk, _, _ := h.reserveTenant(ts, lim, 800, true)
	require.NotNil(t, tk)
	assert.Equal(t, 200.0, tk.tokens)
	h.settleShared(tk, false, 0) // not sent
	for range 2 {
		tk, why, _ := h.reserveTenant(ts, lim, 0, false)
		require.NotNil(t, tk, why)
		h.settleShared(tk, true, 0)
	}
	tk, why, _ := h.reserveTenant(ts, lim, 0, false)
	assert.Nil(t, tk)
	assert.Equal(t, reasonRPM, why)
}

// TestSharedStoreDown proves a store that stops answering costs a
// request at most the timeout, once: the budgets fall back to this
// instance's share (limit / the instances last seen), pins to the local
// table, both counted; and a restarted store is used again without a
// reload.
func TestSharedStoreDown(t *testing.T) {
	srv := startRedis(t)
	const timeout = 200 * time.Millisecond
	a := openTestStore(t, srv.url(), "down:", "a", timeout)
	b := openTestStore(t, srv.url(), "down:", "b", timeout)
	a.beat()
	b.beat()
	require.Equal(t, int64(2), b.instances.Load(), "both registered")
	h := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{"down": {Keys: []string{"sk-down"}, RequestsPerMinute: 10}}}, tenantClock)
	h.shared = b
	ts := h.tenants[1]
	lim := ts.limits()

	srv.stop()
	fallbacks0 := testutil.ToFloat64(metricStoreFallbacks.WithLabelValues("budgets"))
	errors0 := testutil.ToFloat64(metricStoreErrors.WithLabelValues("budget_reserve"))
	admitted := 0
	start := time.Now()
	for range 20 {
		tk, _, _ := h.reserveTenant(ts, lim, 0, false)
		if tk != nil {
			assert.False(t, tk.shared)
			admitted++
		}
	}
	took := time.Since(start)
	assert.Equal(t, 5, admitted, "10 a minute shared by 2: 5 here")
	assert.Less(t, took, 2*timeout, "one timeout, then the store is left alone")
	assert.Equal(t, 20.0, testutil.ToFloat64(metricStoreFallbacks.WithLabelValues("budgets"))-fallbacks0)
	// One failed call (the heartbeat's, when it came first).
	assert.LessOrEqual(t, testutil.ToFloat64(metricStoreErrors.WithLabelValues("budget_reserve"))-errors0, 1.0)
	got, _ := b.pinOf(&policies.Request{PreviousResponseID: "resp_x"})
	assert.Empty(t, got)
	st := findStore(t, b)
	assert.False(t, st.Up)
	assert.NotEmpty(t, st.LastError)

	srv.start()
	b.c.downUntil.Store(0) // the second the store is left alone passed
	tk, why, _ := h.reserveTenant(ts, lim, 0, false)
	require.NotNil(t, tk, why)
	assert.True(t, tk.shared, "reconnected by itself")
	assert.True(t, findStore(t, b).Up)
}

func findStore(t *testing.T, s *sharedStore) (st stateapi.Store) {
	t.Helper()
	for _, x := range snapshotStores() {
		if x.Addr == s.c.addr && x.KeyPrefix == s.prefix {
			return x
		}
	}
	t.Fatalf("store %s %s not in the state", s.c.addr, s.prefix)
	return
}

// TestSharedStoreGarbage: a store answering garbage to the budget script
// (here a server that answers every command +OK) makes the decision
// local at once, counted as an error.
func TestSharedStoreGarbage(t *testing.T) {
	url, _ := hostileStore(t, "+OK\r\n", "")
	s := openTestStore(t, url, "g:", "a", time.Second)
	h := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{"garbage": {Keys: []string{"sk-garbage"}, RequestsPerMinute: 3}}}, tenantClock)
	h.shared = s
	ts := h.tenants[1]
	fallbacks0 := testutil.ToFloat64(metricStoreFallbacks.WithLabelValues("budgets"))
	start := time.Now()
	tk, why, _ := h.reserveTenant(ts, ts.limits(), 0, false)
	require.NotNil(t, tk, why)
	assert.False(t, tk.shared)
	assert.Less(t, time.Since(start), 500*time.Millisecond)
	assert.Equal(t, 1.0, testutil.ToFloat64(metricStoreFallbacks.WithLabelValues("budgets"))-fallbacks0)
	// The script's answer (or the heartbeat's, when it came first) was an
	// error.
	assert.Positive(t, s.c.errs.Load())
}

// TestSharedHeartbeat: instances count themselves; one that leaves is
// dropped at once, one that dies within instanceTTL.
func TestSharedHeartbeat(t *testing.T) {
	srv := startRedis(t)
	a := openTestStore(t, srv.url(), "hb:", "a", time.Second)
	b, err := openSharedStore(storeAddr{url: srv.url(), timeout: time.Second}, "hb:", "b", nil)
	require.NoError(t, err)
	c := openTestStore(t, srv.url(), "hb:", "c", time.Second)
	a.beat()
	b.beat()
	c.beat()
	assert.Equal(t, int64(3), c.instances.Load())
	require.NoError(t, b.Destruct())
	a.beat()
	assert.Equal(t, int64(2), a.instances.Load(), "b left")
	assert.Equal(t, 2.0, a.share())
}

// TestSharedStoreCaddyfile covers shared_store's syntax and the {env.*}
// placeholder in its URL.
func TestSharedStoreCaddyfile(t *testing.T) {
	var h LLMRoute
	require.NoError(t, h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`llm_route {
		shared_store redis://:{env.LLMROUTE_TEST_STORE_PASS}@127.0.0.1:6390/2 {
			key_prefix prod:
			timeout 20ms
		}
	}`)))
	require.NotNil(t, h.SharedStore)
	assert.Equal(t, SharedStoreConfig{URL: "redis://:{env.LLMROUTE_TEST_STORE_PASS}@127.0.0.1:6390/2", KeyPrefix: "prod:",
		Timeout: caddy.Duration(20 * time.Millisecond)}, *h.SharedStore)
	t.Setenv("LLMROUTE_TEST_STORE_PASS", "s3cret")
	require.NoError(t, h.provisionShared(caddy.NewReplacer()))
	t.Cleanup(h.releaseShared)
	opt := h.shared.c.rdb.Options()
	assert.Equal(t, "s3cret", opt.Password)
	assert.Equal(t, 2, opt.DB)
	assert.Equal(t, "prod:", h.shared.prefix)
	for _, tt := range []struct{ in, want string }{
		{"llm_route {\n shared_store\n}", "wrong argument count"},
		{"llm_route {\n shared_store http://x\n}", "redis://"},
		{"llm_route {\n shared_store redis://x:1/y\n}", "database"},
		{"llm_route {\n shared_store redis://x:1 {\n timeout soon\n }\n}", "timeout"},
		{"llm_route {\n shared_store redis://x:1 {\n ttl 1m\n }\n}", "unrecognized"},
		{"llm_route {\n shared_store redis://x:1 {\n tls_ca /etc/ca.pem\n }\n}", "rediss://"},
	} {
		var h LLMRoute
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.in))
		if assert.Error(t, err, tt.in) {
			assert.Contains(t, err.Error(), tt.want, tt.in)
		}
	}
}

// TestSharedLeases proves a tenant's max_in_flight holds across
// instances: 3 leases through two handlers, a fourth waits and gets the
// first one given back, or 429 queue_timeout past the wait; a crashed
// instance's leases come back within leaseTTL; with the store down each
// instance takes its share (3 / 2 instances: 1).
func TestSharedLeases(t *testing.T) {
	srv := startRedis(t)
	ttl0, wait0 := leaseTTL, leaseWait
	leaseTTL, leaseWait = 600*time.Millisecond, 300*time.Millisecond
	t.Cleanup(func() { leaseTTL, leaseWait = ttl0, wait0 })
	th := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{"lz": {Keys: []string{"sk-lz"}, MaxInFlight: 3}}}, tenantClock)
	ts := th.tenants[1]
	hs := []*LLMRoute{{shared: openTestStore(t, srv.url(), "lz:", "a", time.Second)}, {shared: openTestStore(t, srv.url(), "lz:", "b", time.Second)}}
	req := func() (*routeCtx, *http.Request) {
		return &routeCtx{tk: &ticket{ts: ts, flow: ts.name}}, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
	}
	var held []*routeCtx
	for i := range 3 {
		rc, r := req()
		_, ok := hs[i%2].leaseTenant(r, rc)
		require.True(t, ok, "lease %d", i)
		held = append(held, rc)
	}
	rc, r := req()
	start := time.Now()
	apiErr, ok := hs[1].leaseTenant(r, rc)
	assert.False(t, ok, "a fourth is over the cap")
	assert.Equal(t, http.StatusTooManyRequests, apiErr.status)
	assert.Equal(t, "queue_timeout", apiErr.code)
	assert.GreaterOrEqual(t, time.Since(start), leaseWait)

	got := make(chan bool, 1)
	go func() {
		rc, r := req()
		_, ok := hs[1].leaseTenant(r, rc)
		got <- ok
		hs[1].releaseLease(rc)
	}()
	hs[0].releaseLease(held[0])
	assert.True(t, <-got, "the fourth gets the lease given back")
	hs[1].releaseLease(held[1])
	hs[0].releaseLease(held[2])

	// Instance c takes all three and dies without releasing them.
	c, err := openSharedStore(storeAddr{url: srv.url(), timeout: time.Second}, "lz:", "c", nil)
	require.NoError(t, err)
	hc := &LLMRoute{shared: c}
	for range 3 {
		rc, r := req()
		_, ok := hc.leaseTenant(r, rc)
		require.True(t, ok)
	}
	require.NoError(t, c.Destruct()) // no more refreshes
	start = time.Now()
	leaseWait = 5 * time.Second
	rc, r = req()
	_, ok = hs[0].leaseTenant(r, rc)
	returned := time.Since(start)
	assert.True(t, ok, "the dead instance's slots came back")
	assert.Less(t, returned, leaseTTL+500*time.Millisecond, "within the lease's TTL")
	hs[0].releaseLease(rc)

	// The store down: 3 / 2 instances is 1 slot here.
	hs[0].shared.beat()
	hs[1].shared.beat()
	require.Equal(t, 2.0, hs[0].shared.share())
	srv.stop()
	leaseWait = 200 * time.Millisecond
	rc1, r1 := req()
	_, ok = hs[0].leaseTenant(r1, rc1)
	assert.True(t, ok)
	assert.Empty(t, rc1.lease.id, "taken locally")
	rc2, r2 := req()
	_, ok = hs[0].leaseTenant(r2, rc2)
	assert.False(t, ok, "past this instance's share")
	hs[0].releaseLease(rc1)
	rc3, r3 := req()
	_, ok = hs[0].leaseTenant(r3, rc3)
	assert.True(t, ok, "the share given back")
	hs[0].releaseLease(rc3)
}

// TestSharedSessions proves a session home bound by one instance is read
// by another before it routes the session (overriding its own entry),
// and that a full set of writes out drops the next one.
func TestSharedSessions(t *testing.T) {
	srv := startRedis(t)
	a := openTestStore(t, srv.url(), "ss:", "a", time.Second)
	b := openTestStore(t, srv.url(), "ss:", "b", time.Second)
	found := 0
	for i := range 20 {
		key := sessionKey("m", fmt.Sprintf("shared-session-%d", i))
		addr := fmt.Sprintf("10.0.1.%d:8000", i%3+1)
		sessionHomes.Add(key, "10.9.9.9:1") // b's own, stale entry
		a.shareSession(key, addr)
		deadline := time.Now().Add(5 * time.Second)
		for len(a.sessionWrites) > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		b.sessionHome(key)
		if got, _ := sessionHomes.Get(key); got == addr {
			found++
		}
		sessionHomes.Remove(key)
	}
	assert.Equal(t, 20, found)

	drops0 := testutil.ToFloat64(metricStoreFallbacks.WithLabelValues("sessions"))
	for range maxSessionWrites {
		a.sessionWrites <- struct{}{}
	}
	a.shareSession(1, "10.0.1.1:8000")
	assert.Equal(t, 1.0, testutil.ToFloat64(metricStoreFallbacks.WithLabelValues("sessions"))-drops0, "dropped")
	for range maxSessionWrites {
		<-a.sessionWrites
	}
}

// TestSharedTokenBudget proves tokens_per_minute is one budget across
// instances, settled from usage: 1000 tokens a minute, requests of 200
// estimated tokens that use 250, alternately through two handlers: 4
// admitted (200 + 3 x 250 + the fifth's 200 would pass 1000: the
// settled usage counts), the fifth refused for tokens.
func TestSharedTokenBudget(t *testing.T) {
	srv := startRedis(t)
	th := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{"tpm": {Keys: []string{"sk-tpm"}, TokensPerMinute: 1000}}}, tenantClock)
	ts := th.tenants[1]
	hs := []*LLMRoute{{shared: openTestStore(t, srv.url(), "tpm:", "a", time.Second)}, {shared: openTestStore(t, srv.url(), "tpm:", "b", time.Second)}}
	admitted, why := 0, ""
	for i := range 10 {
		tk, w, _ := hs[i%2].reserveTenant(ts, ts.limits(), 800, true)
		if tk == nil {
			why = w
			break
		}
		require.True(t, tk.shared)
		tk.tokens = 200 // the estimate, whatever the tenant learnt
		hs[i%2].settleShared(tk, true, 250)
		admitted++
	}
	assert.Equal(t, 4, admitted)
	assert.Equal(t, reasonTPM, why)
}

// TestSharedStoreReloads proves a reload opens no connections: a new
// handler of the same store shares the old one's client and
// registration, which the last Cleanup closes.
func TestSharedStoreReloads(t *testing.T) {
	srv := startRedis(t)
	cfg := &SharedStoreConfig{URL: srv.url(), KeyPrefix: "rl:"}
	old := &LLMRoute{SharedStore: cfg}
	require.NoError(t, old.provisionShared(caddy.NewReplacer()))
	first := old.shared
	for range 10 {
		next := &LLMRoute{SharedStore: cfg}
		require.NoError(t, next.provisionShared(caddy.NewReplacer()))
		assert.Same(t, first, next.shared, "the reload shares the store")
		old.releaseShared()
		old = next
	}
	ctx, cancel := first.c.ctx()
	defer cancel()
	require.NoError(t, first.c.rdb.Ping(ctx).Err(), "still open")
	assert.LessOrEqual(t, int(first.c.rdb.PoolStats().TotalConns), 2, "no connection per reload")
	old.releaseShared()
	assert.Error(t, first.c.rdb.Ping(ctx).Err(), "the last release closed it")
}

// TestSharedStoreSlow: a store that takes connections and never answers
// costs the first request the timeout and the next ones nothing for a
// second (left alone): every decision is this instance's own.
func TestSharedStoreSlow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // read everything, answer nothing
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	const timeout = 150 * time.Millisecond
	s := openTestStore(t, "redis://"+ln.Addr().String(), "slow:", "a", timeout)
	h := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{"slow": {Keys: []string{"sk-slow"}, RequestsPerMinute: 100}}}, tenantClock)
	h.shared = s
	ts := h.tenants[1]
	var slowest time.Duration
	for range 10 {
		t0 := time.Now()
		tk, why, _ := h.reserveTenant(ts, ts.limits(), 0, false)
		slowest = max(slowest, time.Since(t0))
		require.NotNil(t, tk, why)
		assert.False(t, tk.shared)
		ts.settle(tk, true, 0, false)
	}
	// A call waits its timeout and no more (the bound leaves room for a
	// loaded machine); after the first, the store is left alone: the
	// failures counted are the first reservation's and at most the
	// heartbeat's, not ten.
	assert.Less(t, slowest, timeout+time.Second, "bounded by the timeout")
	assert.LessOrEqual(t, s.c.errs.Load(), uint64(2), "one timeout, not ten")
	assert.Positive(t, s.c.errs.Load(), "the store was tried")
}

// TestSharedStoreTLS runs the shared store over rediss:// against a
// server that speaks TLS only: with tls_ca naming the server's CA, pins
// go through; with the system's roots the handshake fails (the store is
// down and the instance decides alone, the error names the certificate);
// tls_ca on a redis:// URL is refused.
func TestSharedStoreTLS(t *testing.T) {
	srv := redisproc.ForTestTLS(t)
	require.Contains(t, srv.URL(), "rediss://")
	var h LLMRoute
	require.NoError(t, h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(fmt.Sprintf(`llm_route {
		shared_store %s {
			key_prefix tls:
			timeout 1s
			tls_ca %s
		}
	}`, srv.URL(), srv.CAFile()))))
	assert.Equal(t, srv.CAFile(), h.SharedStore.TLSCA)
	require.NoError(t, h.provisionShared(caddy.NewReplacer()))
	t.Cleanup(h.releaseShared)
	trusted := h.shared
	trusted.sharePin("10.0.0.7:8000", "resp_tls", &policies.Request{})
	stateHomes.Remove(stateKey(stateResponse, "resp_tls"))
	got, _ := trusted.pinOf(&policies.Request{PreviousResponseID: "resp_tls"})
	assert.Equal(t, "10.0.0.7:8000", got, "the pin went through the TLS store")
	assert.True(t, trusted.c.available())

	untrusted, err := openSharedStore(storeAddr{url: srv.URL(), timeout: time.Second}, "tls:", "b", nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = untrusted.Destruct() })
	stateHomes.Remove(stateKey(stateResponse, "resp_tls"))
	got, _ = untrusted.pinOf(&policies.Request{PreviousResponseID: "resp_tls"})
	assert.Empty(t, got, "a store whose certificate is not trusted answers nothing")
	assert.False(t, untrusted.c.available(), "marked down")
	if e := untrusted.c.lastErr.Load(); assert.NotNil(t, e) {
		assert.Contains(t, *e, "certificate")
	}

	_, err = newStoreClient(storeAddr{url: "redis://" + srv.Addr(), timeout: time.Second, tlsCA: srv.CAFile()}, nil)
	assert.ErrorContains(t, err, "rediss://")
	_, err = newStoreClient(storeAddr{url: srv.URL(), timeout: time.Second, tlsCA: filepath.Join(t.TempDir(), "missing.pem")}, nil)
	assert.ErrorContains(t, err, "tls_ca")
}
