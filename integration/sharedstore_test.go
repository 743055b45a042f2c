package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
	"github.com/llmroute/caddy-llmroute/internal/testrig/redisproc"
)

// The shared store cases: two caddy instances with llm_route's
// shared_store on one real redis-server (valkey-server or redis-server on
// PATH; skipped without), in front of the same simulated replicas.

// storeServer is a redis-server on 127.0.0.1 the test can stop and start.
type storeServer struct {
	t *testing.T
	*redisproc.Server
}

func startStore(t *testing.T) *storeServer {
	t.Helper()
	return &storeServer{t: t, Server: redisproc.ForTest(t)}
}

func (s *storeServer) addr() string { return s.Addr() }
func (s *storeServer) start()       { require.NoError(s.t, s.Start()) }
func (s *storeServer) stop()        { s.Stop() }

// waitValue waits until a key matching pattern holds value.
func (s *storeServer) waitValue(t *testing.T, pattern, value string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr()})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		keys, _ := rdb.Keys(ctx, pattern).Result()
		for _, k := range keys {
			if v, _ := rdb.Get(ctx, k).Result(); v == value {
				return
			}
		}
		require.NoError(t, ctx.Err(), "no %s holds %s", pattern, value)
		time.Sleep(10 * time.Millisecond)
	}
}

// sharedSite is the site of both instances: four replicas behind
// prefix_load, a tenant "rl" with a request budget, and the shared store
// (none when store is "").
func sharedSite(store string, ups []string, rpm int) string {
	shared := ""
	if store != "" {
		shared = fmt.Sprintf("\t\tshared_store redis://%s {\n\t\t\tkey_prefix it:\n\t\t\ttimeout 1s\n\t\t}\n", store)
	}
	return fmt.Sprintf(`	llm_route {
		replica_header X-LLMRoute-Replica
%s		tenant rl {
			keys sk-rl
			requests_per_minute %d
		}
		tenant tp {
			keys sk-tp
			tokens_per_minute %d
		}
		tenant free {
			keys sk-free
		}
	}
	reverse_proxy %s {
		lb_policy llm prefix_load
	}`, shared, rpm, tpmLimit, strings.Join(ups, " "))
}

// tpmLimit is tenant tp's tokens_per_minute in sharedSite.
const tpmLimit = 3000

// twoGateways starts the replicas and two instances of one site.
func twoGateways(t *testing.T, store string, rpm int) (*gateway, *gateway) {
	var ups []string
	for i := range 4 {
		ups = append(ups, startSim(t, fmt.Sprintf("shared-%d", i), "m"))
	}
	site := sharedSite(store, ups, rpm)
	a, b := startGateway(t, site), startGateway(t, site)
	a.site, b.site = site, site
	return a, b
}

// followUps sends n first responses, each through one instance in turn,
// and its follow-up (an unrelated input: only the id says where to go)
// through the next; it returns how many follow-ups left the response's
// replica and how many requests failed.
func followUps(t *testing.T, gs []*gateway, n int) (misroutes, failed int) {
	key := map[string]string{"Authorization": "Bearer sk-free"}
	homes := map[string]int{}
	defer func() { t.Logf("first responses by replica: %v", homes) }()
	// Inputs longer than a few blocks, distinct from their start, so that
	// prefix_load spreads them over the replicas.
	long := func(what string, i int) string { return strings.Repeat(fmt.Sprintf("%s %d. ", what, i), 200) }
	for i := range n {
		first, second := gs[i%len(gs)], gs[(i+1)%len(gs)]
		r := first.do(http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":"m","stream":%v,"input":%q}`, i%4 == 0, long("first turn", i)), key)
		if r.status != http.StatusOK {
			failed++
			continue
		}
		id, home := respID(t, r), r.header.Get("X-LLMRoute-Replica")
		homes[home]++
		next := second.do(http.MethodPost, "/v1/responses", fmt.Sprintf(`{"model":"m","previous_response_id":%q,"input":%q}`, id, long("unrelated", i*7919)), key)
		switch {
		case next.status != http.StatusOK:
			failed++
		case next.header.Get("X-LLMRoute-Replica") != home:
			misroutes++
		}
	}
	return misroutes, failed
}

// TestSharedStoreFollowUps proves a follow-up sent through another of 2
// or 4 instances lands on the replica holding its response: 0 misroutes
// in 100 with the shared store; without it (the control) they do not.
func TestSharedStoreFollowUps(t *testing.T) {
	for _, instances := range []int{2, 4} {
		t.Run(fmt.Sprintf("instances_%d", instances), func(t *testing.T) {
			srv := startStore(t)
			misroutes, failed := followUps(t, gateways(t, srv.addr(), 1000, instances), 100)
			t.Logf("%d instances, shared store: %d misroutes, %d failed of 100", instances, misroutes, failed)
			assert.Zero(t, failed)
			assert.Zero(t, misroutes)

			misroutes, failed = followUps(t, gateways(t, "", 1000, instances), 20)
			t.Logf("%d instances, no shared store: %d misroutes, %d failed of 20", instances, misroutes, failed)
			assert.Positive(t, misroutes+failed, "the control: instances that share nothing misroute")
		})
	}
}

// gateways starts the replicas and n instances of one site.
func gateways(t *testing.T, store string, rpm, n int) []*gateway {
	a, b := twoGateways(t, store, rpm)
	gs := []*gateway{a, b}
	for len(gs) < n {
		gs = append(gs, startGateway(t, a.site))
	}
	return gs
}

// fanOut calls each(g, i) for i in 0..n-1, workers at once, g the
// gateways in turn.
func fanOut(gs []*gateway, n, workers int, each func(g *gateway, i int)) {
	var next atomic.Int32
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				each(gs[i%len(gs)], i)
			}
		}()
	}
	wg.Wait()
}

// rpmThrough sends n requests of tenant rl, workers at once, through the
// gateways in turn, and counts the answers by status.
func rpmThrough(t *testing.T, gs []*gateway, n, workers int) map[int]int {
	var mu sync.Mutex
	got := map[int]int{}
	fanOut(gs, n, workers, func(g *gateway, i int) {
		r := g.do(http.MethodPost, "/v1/chat/completions", chatFor("m", fmt.Sprintf("budget %d", i)), map[string]string{"Authorization": "Bearer sk-rl"})
		mu.Lock()
		got[r.status]++
		mu.Unlock()
	})
	return got
}

// tpmThrough sends n requests of tenant tp (prompts of about 200 tokens),
// workers at once, through the gateways in turn; it returns the tokens
// the admitted ones used (the engines' usage), how many were admitted,
// the most one used, and how many got anything but 200 or 429.
func tpmThrough(t *testing.T, gs []*gateway, n, workers int) (used, admitted, most, other int) {
	var mu sync.Mutex
	fanOut(gs, n, workers, func(g *gateway, i int) {
		prompt := strings.Repeat(fmt.Sprintf("tokens %d ", i), 80)
		r := g.do(http.MethodPost, "/v1/chat/completions", chatFor("m", prompt), map[string]string{"Authorization": "Bearer sk-tp"})
		var u struct {
			Usage struct {
				TotalTokens int `json:"total_tokens"`
			} `json:"usage"`
		}
		mu.Lock()
		defer mu.Unlock()
		switch r.status {
		case http.StatusOK:
			assert.NoError(t, json.Unmarshal(r.body, &u))
			assert.Positive(t, u.Usage.TotalTokens, "the engine reports usage")
			used += u.Usage.TotalTokens
			most = max(most, u.Usage.TotalTokens)
			admitted++
		case http.StatusTooManyRequests:
		default:
			other++
		}
	})
	return used, admitted, most, other
}

// TestSharedStoreTPM proves tokens_per_minute holds across 2 and 4
// caddy processes, settled from the engines' usage: 80 requests of about
// 200 tokens, 6 at a time, through each instance in turn, against 3,000
// tokens a minute use at most the limit, plus what the bucket refills
// during the test, plus one request's worth per concurrent worker (each
// admitted on its estimate before the others settle), where instances
// that share nothing use the limit each.
func TestSharedStoreTPM(t *testing.T) {
	const n, workers = 80, 6
	for _, instances := range []int{2, 4} {
		t.Run(fmt.Sprintf("instances_%d", instances), func(t *testing.T) {
			srv := startStore(t)
			gs := gateways(t, srv.addr(), 1000, instances)
			start := time.Now()
			used, admitted, most, other := tpmThrough(t, gs, n, workers)
			refill := int(time.Since(start).Seconds()*tpmLimit/60) + 1
			bound := tpmLimit + refill + workers*most
			t.Logf("%d instances, shared store: %d tokens used by %d admitted (limit %d, refill %d, bound %d)",
				instances, used, admitted, tpmLimit, refill, bound)
			assert.Zero(t, other, "only admitted or refused")
			assert.Less(t, admitted, n, "the budget refused some")
			assert.LessOrEqual(t, used, bound, "one budget across the instances")
			assert.GreaterOrEqual(t, used, tpmLimit-most, "the budget was spent")

			start = time.Now()
			used, admitted, _, other = tpmThrough(t, gateways(t, "", 1000, instances), n, workers)
			refill = int(time.Since(start).Seconds()*tpmLimit/60) + 1
			t.Logf("%d instances, no shared store: %d tokens used by %d admitted", instances, used, admitted)
			assert.Zero(t, other)
			assert.Greater(t, used, tpmLimit+refill+workers*most, "the control: each instance spends its own limit")
		})
	}
}

// TestSharedStoreRPM proves requests_per_minute holds across 2 and 4
// instances: 60 requests, 8 at a time, through each in turn, against 12
// a minute admit 12 (plus what the bucket refills during the test, a
// fifth of a request a second), where instances that share nothing
// admit 12 each. With the store stopped, each admits its share (12 / N)
// on its own: the outage's documented bound, at most one more limit in
// the minute it began.
func TestSharedStoreRPM(t *testing.T) {
	const limit, n = 12, 60
	for _, instances := range []int{2, 4} {
		t.Run(fmt.Sprintf("instances_%d", instances), func(t *testing.T) {
			srv := startStore(t)
			gs := gateways(t, srv.addr(), limit, instances)
			start := time.Now()
			refill := func() int { return int(time.Since(start).Seconds() * limit / 60) }
			got := rpmThrough(t, gs, n, 8)
			t.Logf("%d instances, shared store: %v in %v (limit %d, refill %d)", instances, got, time.Since(start), limit, refill())
			assert.GreaterOrEqual(t, got[http.StatusOK], limit)
			assert.LessOrEqual(t, got[http.StatusOK], limit+refill())
			assert.Equal(t, n, got[http.StatusOK]+got[http.StatusTooManyRequests], "only admitted or refused")

			// The store down: each instance admits limit / N on its own
			// (once each has seen the others register: a heartbeat).
			waitInstances(t, instances, gs...)
			srv.stop()
			got = rpmThrough(t, gs, n, 8)
			t.Logf("%d instances, store down: %v (%d per instance, refill %d)", instances, got, limit/instances, refill())
			assert.GreaterOrEqual(t, got[http.StatusOK], limit)
			assert.LessOrEqual(t, got[http.StatusOK], limit+refill())
			assert.Equal(t, n, got[http.StatusOK]+got[http.StatusTooManyRequests], "only admitted or refused")

			got = rpmThrough(t, gateways(t, "", limit, instances), n, 8)
			t.Logf("%d instances, no shared store: %v", instances, got)
			assert.Equal(t, limit*instances, got[http.StatusOK], "the control: each instance admits its own limit")
		})
	}
}

// TestSharedStoreOutage proves the store going away mid-run and coming
// back fails no request: pins and budgets fall back to each instance's
// own state within the store's timeout, /llm_route/state says the store
// is down, and once it is back the instances share again (a follow-up
// through the other instance finds its replica).
func TestSharedStoreOutage(t *testing.T) {
	srv := startStore(t)
	a, b := twoGateways(t, srv.addr(), 1000)
	failed, slowest := 0, time.Duration(0)
	run := func(n int, what string) {
		for i := range n {
			g := a
			if i%2 == 1 {
				g = b
			}
			start := time.Now()
			r := g.do(http.MethodPost, "/v1/chat/completions", chatFor("m", fmt.Sprintf("%s %d", what, i)), map[string]string{"Authorization": "Bearer sk-rl"})
			slowest = max(slowest, time.Since(start))
			if r.status != http.StatusOK {
				failed++
			}
		}
	}
	run(20, "before")
	srv.stop()
	run(20, "down")
	st := adminState(t, a)
	require.Len(t, st.Stores, 1)
	assert.False(t, st.Stores[0].Up, "the state says the store is down")
	assert.NotEmpty(t, st.Stores[0].LastError)
	srv.start()
	// The store is left alone for a second after a failure; then the
	// pooled clients reconnect by themselves.
	deadline := time.Now().Add(10 * time.Second)
	for {
		run(2, "back")
		if s := adminState(t, a).Stores; len(s) == 1 && s[0].Up && s[0].Instances == 2 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the store did not come back")
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%d failed; slowest request %v", failed, slowest)
	assert.Zero(t, failed, "no request fails because of the store")
	misroutes, failedFollow := followUps(t, []*gateway{a, b}, 10)
	assert.Zero(t, misroutes+failedFollow, "shared again")
}

// waitInstances waits until every gateway's store has seen n instances.
func waitInstances(t *testing.T, n int, gs ...*gateway) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for _, g := range gs {
		for {
			if s := adminState(t, g).Stores; len(s) == 1 && s[0].Instances == n {
				break
			}
			require.True(t, time.Now().Before(deadline), "instances did not see each other")
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// adminState reads g's /llm_route/state.
func adminState(t *testing.T, g *gateway) stateapi.State {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := g.caddy.State(ctx)
	require.NoError(t, err)
	return st
}

// TestSharedStoreTenantInFlight proves a tenant's max_in_flight holds
// across two and four instances: 12 slow streams of a tenant capped at
// 3, spread over the instances at once, all served, never more than 3 at
// the replica at a time (instances that share nothing allow 3 each), and
// the harness's leak checks pass on every instance.
func TestSharedStoreTenantInFlight(t *testing.T) {
	srv := startStore(t)
	// peakThrough sends 12 slow streams of the tenant over instances of
	// one config and returns how many were served and the most the
	// replica ran at once.
	peakThrough := func(t *testing.T, instances int, tenants []string) (served int32, peak int) {
		cfg := baseConfig()
		cfg.MaxInFlight, cfg.QueueSize, cfg.Tenants = 16, 64, tenants
		e := newEnv(t, 1, nil, cfg)
		gs := []*env{e}
		for len(gs) < instances {
			g := &env{t: t, tracker: e.tracker, results: map[string]*result{}}
			g.start(e.cfg)
			t.Cleanup(g.afterCase)
			gs = append(gs, g)
		}
		hdr := map[string]string{"Authorization": "Bearer sk-lz", "X-Fake-Fault": "slow", "X-Fake-Delay": "40ms"}
		var wg sync.WaitGroup
		var okCount atomic.Int32
		for i := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res := gs[i%len(gs)].do(newID(t), chatBody(true, false, fmt.Sprintf("capped %d", i)), hdr)
				if res.Status == http.StatusOK && res.SawDone {
					okCount.Add(1)
				}
			}()
		}
		wg.Wait()
		return okCount.Load(), e.tracker.MaxConcurrent(e.rep(0).Addr())
	}
	const tenant = "tenant lz {\n\tkeys sk-lz\n\tmax_in_flight 3\n}"
	for _, instances := range []int{2, 4} {
		t.Run(fmt.Sprintf("instances_%d", instances), func(t *testing.T) {
			store := fmt.Sprintf("shared_store redis://%s {\n\tkey_prefix inflight%d:\n\ttimeout 2s\n}", srv.addr(), instances)
			served, peak := peakThrough(t, instances, []string{store, tenant})
			t.Logf("12 streams of a tenant capped at 3 through %d instances: %d served, at most %d at once", instances, served, peak)
			assert.Equal(t, int32(12), served, "every request served")
			assert.Equal(t, 3, peak, "the cap, across the instances")

			served, peak = peakThrough(t, instances, []string{tenant})
			t.Logf("the same without the store: %d served, at most %d at once", served, peak)
			assert.Equal(t, int32(12), served)
			assert.Greater(t, peak, 3, "the control: each instance allows the cap on its own")
		})
	}
}

// TestSharedStoreSessionMoves proves a session moved through one
// instance (its home full there) is followed through the other: with
// the shared store the other instance sends it where it moved; without
// (the control) to its old home.
func TestSharedStoreSessionMoves(t *testing.T) {
	srv := startStore(t)
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared_%v", shared), func(t *testing.T) {
			cfg := baseConfig()
			cfg.Strategy, cfg.MaxInFlight = "prefix_load", 2
			if shared {
				// A timeout a loaded machine cannot reach: this case is about
				// the move, not the fallback (TestSharedStoreOutage's).
				cfg.Tenants = []string{fmt.Sprintf("shared_store redis://%s {\n\tkey_prefix sess:\n\ttimeout 2s\n}", srv.addr())}
			}
			e := newEnv(t, 2, nil, cfg)
			eb := &env{t: t, tracker: e.tracker, results: map[string]*result{}}
			eb.start(e.cfg)
			t.Cleanup(eb.afterCase)
			session := "moving-session-" + newID(t)
			sess := func(g *env, prompt string, extra map[string]string) *result {
				hdr := map[string]string{"X-Session-Id": session}
				for k, v := range extra {
					hdr[k] = v
				}
				return g.do(newID(t), chatBody(false, false, prompt), hdr)
			}
			first := sess(e, "the first turn", nil)
			require.Equal(t, http.StatusOK, first.Status)
			home := first.Header.Get(replicaHdr)
			// Fill home on instance A with two slow turns: A moves the session.
			slow := map[string]string{fakereplica.HeaderFault: fakereplica.FaultSlow, fakereplica.HeaderDelay: "100ms", fakereplica.HeaderChunks: "10"}
			var wg sync.WaitGroup
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					assert.Equal(t, http.StatusOK, sess(e, fmt.Sprintf("slow turn %d", i), slow).Status)
				}()
			}
			e.waitState(5*time.Second, "home at its cap on A", func(st stateapi.State) bool {
				r, _ := st.Replica(home)
				return r.InFlight >= 2
			})
			moved := sess(e, "while home is full", nil)
			require.Equal(t, http.StatusOK, moved.Status)
			to := moved.Header.Get(replicaHdr)
			require.NotEqual(t, home, to, "A moved the session")
			if shared {
				// The move's write is off the request's path: wait for it.
				srv.waitValue(t, "sess:session:*", to)
			}
			follow := sess(eb, "through the other instance", nil)
			require.Equal(t, http.StatusOK, follow.Status)
			if shared {
				assert.Equal(t, to, follow.Header.Get(replicaHdr), "B follows the move")
			} else {
				assert.Equal(t, home, follow.Header.Get(replicaHdr), "the control: B sends it to the old home")
			}
			wg.Wait()
		})
	}
}

// TestSharedStoreCrashedInstanceLeases proves an instance killed while
// it holds a tenant's leases gives them back within the lease TTL: B
// holds both of a tenant's max_in_flight 2 in two long streams and is
// killed (SIGKILL: no cleanup); A's request of the tenant waits while
// the dead instance's leases live, then is served, within 10 s (the
// TTL) plus a poll.
func TestSharedStoreCrashedInstanceLeases(t *testing.T) {
	srv := startStore(t)
	cfg := baseConfig()
	cfg.MaxInFlight, cfg.QueueSize = 16, 64
	cfg.Tenants = []string{
		fmt.Sprintf("shared_store redis://%s {\n\tkey_prefix crash:\n\ttimeout 2s\n}", srv.addr()),
		"tenant lz {\n\tkeys sk-lz\n\tmax_in_flight 2\n}",
	}
	e := newEnv(t, 1, nil, cfg)
	eb := &env{t: t, tracker: e.tracker, results: map[string]*result{}}
	eb.start(e.cfg)
	long := map[string]string{"Authorization": "Bearer sk-lz", fakereplica.HeaderFault: fakereplica.FaultSlow,
		fakereplica.HeaderDelay: "1s", fakereplica.HeaderChunks: "30"}
	var streams []*stream
	for i := range 2 {
		s := eb.open(newID(t), chatBody(true, false, fmt.Sprintf("held by B %d", i)), long)
		require.Equal(t, http.StatusOK, s.res.Status)
		streams = append(streams, s)
	}
	defer func() {
		for _, s := range streams {
			s.abandon()
		}
	}()
	rep := e.rep(0).Addr()
	for deadline := time.Now().Add(5 * time.Second); e.tracker.Concurrent(rep) < 2; {
		require.True(t, time.Now().Before(deadline), "B's streams run")
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, syscall.Kill(eb.caddy.Pid(), syscall.SIGKILL))
	killed := time.Now()
	res := e.do(newID(t), chatBody(false, false, "after the crash"), map[string]string{"Authorization": "Bearer sk-lz"})
	took := time.Since(killed)
	t.Logf("served %v after the instance holding the leases was killed", took)
	assert.Equal(t, http.StatusOK, res.Status)
	assert.Greater(t, took, 5*time.Second, "it waited while the dead instance's leases lived")
	assert.Less(t, took, 12*time.Second, "they came back within the lease TTL")
}
