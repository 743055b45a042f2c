package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// jsonConfig is the README's JSON example: the policy tagged @id so the
// admin API can address it directly.
func jsonConfig(admin, port int, strategy string, upstreams ...string) []byte {
	ups := make([]map[string]any, len(upstreams))
	for i, u := range upstreams {
		ups[i] = map[string]any{"dial": u}
	}
	cfg := map[string]any{
		"admin":   map[string]any{"listen": fmt.Sprintf("127.0.0.1:%d", admin)},
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "ERROR"}}},
		"apps": map[string]any{"http": map[string]any{"servers": map[string]any{"srv0": map[string]any{
			"listen": []string{fmt.Sprintf("127.0.0.1:%d", port)},
			"routes": []any{map[string]any{"handle": []any{
				map[string]any{"handler": "llm_route"},
				map[string]any{
					"handler":   "reverse_proxy",
					"upstreams": ups,
					"load_balancing": map[string]any{"selection_policy": map[string]any{
						"@id": "llm_policy", "policy": "llm", "strategy": strategy, "max_in_flight": 8,
					}},
				},
			}}},
		}}}},
	}
	b, _ := json.Marshal(cfg)
	return b
}

// TestTenReloadsUnderStreamingLoad proves hot reload through the admin API
// (PATCH /id/llm_policy/strategy, alternating strategies, ten times) while
// streams flow: no request fails, every stream completes, reservations are
// carried over (none leaked, none doubled), and the residency index
// survives because the replica set is unchanged.
func TestTenReloadsUnderStreamingLoad(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.setFault("slow")
	b.setFault("slow")
	r := &router{t: t, port: freePort(t), admin: freePort(t)}
	require.NoError(t, caddy.Load(jsonConfig(r.admin, r.port, "prefix_load", a.addr, b.addr), true))
	t.Cleanup(func() { _ = caddy.Stop() })

	stop := make(chan struct{})
	var sent, completed, failed, unread atomic.Int64
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ { // bounded; stop ends it sooner
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				sent.Add(1)
				body := chatBody(strings.Repeat(fmt.Sprintf("tenant %d ", w%3), 40), id, true)
				resp, err := postRetryUnread(r.url("/v1/chat/completions"), id, body, func() int { return a.count(id) + b.count(id) }, &unread)
				if err != nil {
					failed.Add(1)
					continue
				}
				if resp.StatusCode != 200 {
					failed.Add(1)
					resp.Body.Close()
					continue
				}
				if _, done, err := readSSE(resp); err != nil || !done {
					failed.Add(1)
					continue
				}
				completed.Add(1)
			}
		}()
	}
	waitFor(t, "streams in flight", func() bool { return r.state().TotalInFlight > 0 })
	strategies := []string{"least_load", "prefix_load", "round_robin", "prefix_affinity"}
	adminURL := fmt.Sprintf("http://127.0.0.1:%d/id/llm_policy/strategy", r.admin)
	// Every reload lands on streams in flight. The first half meets the
	// streams admitted under the first config; before the second half a
	// request sent after the first half must have reached a replica (a
	// request reaches one at most once, so more receipts than requests
	// sent until then prove it), so that streams admitted under a
	// reloaded config are carried over too. (The workers' streams run in
	// step, so a new request comes about once per stream length: waiting
	// for one before every reload would multiply the test's time.)
	for i := range 10 {
		sentBefore := int64(-1)
		if i == 5 {
			sentBefore = sent.Load()
		}
		waitFor(t, "streams in flight", func() bool {
			return a.total.Load()+b.total.Load() > sentBefore && r.state().TotalInFlight > 0
		})
		req, _ := http.NewRequest(http.MethodPatch, adminURL, bytes.NewReader([]byte(`"`+strategies[i%len(strategies)]+`"`)))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, "reload %d", i)
	}
	close(stop)
	wg.Wait()
	t.Logf("sent %d, completed %d, failed %d, connection closed before the request was read (retried) %d", sent.Load(), completed.Load(), failed.Load(), unread.Load())
	assert.Zero(t, failed.Load(), "requests failed because of a reload")
	assert.Equal(t, sent.Load(), completed.Load())
	assert.Equal(t, sent.Load(), a.total.Load()+b.total.Load(), "a request was lost or sent twice")
	r.requireDrained(a.addr, b.addr)
	assert.Positive(t, r.replica(a.addr).IndexEntries+r.replica(b.addr).IndexEntries, "index lost across reloads")
	// The strategy that ended up live is the last one patched.
	resp, err := http.Get(adminURL)
	require.NoError(t, err)
	var got string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	resp.Body.Close()
	assert.Equal(t, strategies[9%len(strategies)], got)
	// The state endpoint names the live policy's strategy too, and only it.
	pol := r.state().Policies
	require.Len(t, pol, 1, "a retired policy is still listed")
	assert.Equal(t, strategies[9%len(strategies)], pol[0].Strategy)
}

// postRetryUnread posts body and, if the connection fails before any
// response (Go's server closes idle keep-alive connections when a reload
// shuts the old server down, racing a client that just reused one), checks
// that no replica received the request and retries it (up to 3 times), as OpenAI's
// SDKs do on connection errors.
func postRetryUnread(url, id, body string, received func() int, unread *atomic.Int64) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		resp, err := http.DefaultClient.Do(req)
		if err == nil || attempt == 3 {
			return resp, err
		}
		if received() != 0 {
			return nil, fmt.Errorf("request %s failed after reaching a replica: %w", id, err)
		}
		unread.Add(1)
	}
}

// TestCooldownSurvivesReload proves a cooling replica stays cooling across
// a reload that keeps it.
func TestCooldownSurvivesReload(t *testing.T) {
	a, b := newFake(t), newFake(t)
	r := &router{t: t, port: freePort(t), admin: freePort(t)}
	require.NoError(t, caddy.Load(jsonConfig(r.admin, r.port, "round_robin", a.addr, b.addr), true))
	t.Cleanup(func() { _ = caddy.Stop() })
	a.setFault("503")
	b.setFault("503")
	for i := range 2 {
		resp := post(t, r.url("/v1/chat/completions"), "", fmt.Sprint("c", i), "", chatBody("s", "x", false))
		resp.Body.Close()
	}
	require.True(t, r.replica(a.addr).Cooling && r.replica(b.addr).Cooling)
	require.NoError(t, caddy.Load(jsonConfig(r.admin, r.port, "least_load", a.addr, b.addr), true))
	assert.True(t, r.replica(a.addr).Cooling, "cooldown forgotten on reload")
	// Right after a reload: retried if the old server dropped the
	// connection before any replica saw the request.
	var unread atomic.Int64
	resp, err := postRetryUnread(r.url("/v1/chat/completions"), "after", chatBody("s", "x", false),
		func() int { return a.count("after") + b.count("after") }, &unread)
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	_, code := apiErr(t, resp)
	assert.Equal(t, "no_healthy_replica", code)
}

// TestDeparturePurgesIndex proves that when a replica leaves the upstream
// set a policy sees (dynamic upstreams, scale-down), its index is purged
// while a request still in flight on it keeps its reservation until it
// ends.
func TestDeparturePurgesIndex(t *testing.T) {
	p := &LLMSelection{}
	require.NoError(t, p.setup())
	a, b := "127.0.0.1:1", "127.0.0.1:2"
	stA := p.state(a)
	stB := p.state(b)
	t.Cleanup(func() { releaseReplica(b) })
	stA.belief.Index().Insert([]uint64{1, 2, 3})
	stB.belief.Index().Insert([]uint64{4})
	res, ok := stA.reserve(time.Now(), 0, &p.rules)
	require.True(t, ok)

	p.checkDepartures(reverseproxy.UpstreamPool{{Dial: a}, {Dial: b}})
	assert.Equal(t, 3, stA.belief.Index().Len())
	p.checkDepartures(reverseproxy.UpstreamPool{{Dial: b}})
	assert.Zero(t, stA.belief.Index().Len(), "departed replica's index kept")
	assert.Equal(t, 1, stB.belief.Index().Len(), "staying replica's index touched")
	assert.Equal(t, 1, stA.inFlightNow(), "in-flight reservation dropped early")
	res.end(succeeded)
	assert.Zero(t, stA.inFlightNow())
	_, stillThere := p.states.Load(a)
	assert.False(t, stillThere)
}

// TestSlowStartRampsCap proves a joining replica's cap ramps from 1 to the
// configured cap over slow_start.
func TestSlowStartRampsCap(t *testing.T) {
	now := time.Now()
	cases := []struct {
		age  time.Duration
		want int
	}{{0, 1}, {250 * time.Millisecond, 2}, {500 * time.Millisecond, 4}, {time.Second, 8}, {time.Hour, 8}}
	for _, c := range cases {
		assert.Equal(t, c.want, slowStartLimitAt(now.Add(c.age), now, 8, time.Second), "age %v", c.age)
	}
	assert.Equal(t, 8, slowStartLimitAt(now, now, 8, 0), "off by default")
}

// TestJoiningReplicaNoStampede proves, through Caddy, that a replica that
// joins under slow_start is not handed a burst while it is new.
func TestJoiningReplicaNoStampede(t *testing.T) {
	old, fresh := newFake(t), newFake(t)
	site := func(ups string, slow string) string {
		return fmt.Sprintf(`
	llm_route
	reverse_proxy %s {
		lb_policy llm least_load {
			max_in_flight 8
			slow_start %s
		}
	}`, ups, slow)
	}
	r := startRouter(t, site(old.addr, "1ms"))
	resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody("s", "warm", false))
	resp.Body.Close()
	// Age the old replica's state as if it had served for an hour.
	replicas.Range(func(k, v any) bool {
		if k == old.addr {
			st := v.(*replicaState)
			st.mu.Lock()
			st.firstSeen = time.Now().Add(-time.Hour)
			st.unlock()
		}
		return true
	})
	r.load(site(old.addr+" "+fresh.addr, "5s"))
	hold := make(chan struct{})
	old.setHold(hold)
	fresh.setHold(hold)
	var wg sync.WaitGroup
	var unread atomic.Int64
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The old server may still take (and reset) a new connection
			// right after the reload: retried when no replica saw it.
			id := fmt.Sprint("burst-", i)
			resp, err := postRetryUnread(r.url("/v1/chat/completions"), id, chatBody(fmt.Sprint("tenant", i), "q", false),
				func() int { return old.count(id) + fresh.count(id) }, &unread)
			if assert.NoError(t, err) {
				resp.Body.Close()
			}
		}()
	}
	waitFor(t, "burst placed or queued", func() bool { return old.cur.Load()+fresh.cur.Load()+int64(r.state().Queued) == 12 })
	assert.LessOrEqual(t, fresh.cur.Load(), int64(3), "a joining replica took a stampede (least_load sees it idle)")
	assert.Equal(t, int64(8), old.cur.Load())
	close(hold)
	wg.Wait()
	r.requireDrained(old.addr, fresh.addr)
}

// TestStrategyMemorySurvivesReload proves that what prefix_load learned
// (here, that it is the engines' only client) passes to the policy that
// next routes the same upstream set: from a predecessor still live, from
// one a reload retired; that a reload that changes the set passes it from
// the predecessor sharing the most replicas; and that a policy of a
// disjoint set learns for itself.
func TestStrategyMemorySurvivesReload(t *testing.T) {
	up := func(ports ...int) reverseproxy.UpstreamPool {
		var pool reverseproxy.UpstreamPool
		for _, port := range ports {
			pool = append(pool, &reverseproxy.Upstream{Dial: fmt.Sprintf("127.0.0.1:%d", port)})
		}
		return pool
	}
	pool := up(11, 12)
	var made []*LLMSelection
	t.Cleanup(func() {
		for _, p := range made {
			retire(p)
		}
		bequests.Lock()
		clear(bequests.m)
		bequests.Unlock()
	})
	newPolicy := func(strategy string, pool reverseproxy.UpstreamPool) *LLMSelection {
		p := &LLMSelection{Strategy: strategy, Peers: "auto"}
		require.NoError(t, p.setup())
		goLive(p)
		p.checkDepartures(pool)
		made = append(made, p)
		return p
	}
	peers := func(p *LLMSelection) bool { return p.strategy.(policies.PeerSensor).Peers() }
	legacyOf := func(p *LLMSelection) bool {
		bequests.Lock()
		defer bequests.Unlock()
		_, ok := bequests.m[p.poolSig.Load()]
		return ok
	}

	old := newPolicy("prefix_load", pool)
	require.True(t, peers(old), "a fresh policy assumes peers")
	view := []policies.Replica{
		{Addr: pool[0].Dial, Cap: 8, InFlight: 2, EngineRunning: 2, EngineWaiting: 0, KVUsage: -1},
		{Addr: pool[1].Dial, Cap: 8, InFlight: 2, EngineRunning: 2, EngineWaiting: 0, KVUsage: -1},
	}
	for i := 0; i < 200 && peers(old); i++ {
		old.strategy.Pick(policies.Keys{}, view)
	}
	require.False(t, peers(old), "the engines run what it sent: alone")

	live := newPolicy("prefix_load", pool) // a reload, the old policy not cleaned up yet
	assert.False(t, peers(live), "taken from the live predecessor")
	assert.True(t, peers(newPolicy("prefix_load", up(21, 22))), "a disjoint upstream set learns for itself")

	retire(old)
	retire(live)
	after := newPolicy("prefix_load", pool) // first routes after the old ones' cleanup
	assert.False(t, peers(after), "taken from the retired predecessor")
	assert.False(t, legacyOf(live), "a retired strategy is taken once")

	retire(after)
	grown := newPolicy("prefix_load", up(11, 12, 13)) // the reload added a replica
	assert.False(t, peers(grown), "taken from the retired policy sharing the most replicas")
	assert.False(t, legacyOf(after), "taken once")
	shrunk := newPolicy("prefix_load", up(12, 13)) // another config beside it, overlapping
	assert.False(t, peers(shrunk), "taken from the live policy sharing replicas")

	rr := newPolicy("round_robin", pool) // nothing to take, nothing taken
	retire(grown)
	retire(shrunk)
	// The nearest live policy learns nothing (round robin): the retired
	// prefix_load one still passes its memory on.
	assert.False(t, peers(newPolicy("prefix_load", up(11, 13))), "a policy that learns nothing is passed over")
	assert.Equal(t, "none", grown.status().Peers, "/llm_route/state shows what prefix_load believes")
	assert.Equal(t, "some", made[2].status().Peers)
	assert.Empty(t, rr.status().Peers, "nothing for other strategies")
}

// TestFirstRoutesAtOnce proves that two new policies whose upstream sets
// overlap can make their first routes at the same moment: each looks for
// a predecessor among the other live policies, and neither waits for the
// other.
func TestFirstRoutesAtOnce(t *testing.T) {
	a := reverseproxy.UpstreamPool{{Dial: "127.0.0.1:31"}, {Dial: "127.0.0.1:32"}}
	b := reverseproxy.UpstreamPool{{Dial: "127.0.0.1:32"}, {Dial: "127.0.0.1:33"}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 300 {
			p, q := &LLMSelection{Strategy: "prefix_load"}, &LLMSelection{Strategy: "prefix_load"}
			if p.setup() != nil || q.setup() != nil {
				return
			}
			goLive(p)
			goLive(q)
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); p.checkDepartures(a) }()
			go func() { defer wg.Done(); q.checkDepartures(b) }()
			wg.Wait()
			retire(p)
			retire(q)
			bequests.Lock()
			clear(bequests.m) // next time, no exact predecessor: each looks at the other
			bequests.Unlock()
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("two first routes waited on each other")
	}
	bequests.Lock()
	clear(bequests.m)
	bequests.Unlock()
}
