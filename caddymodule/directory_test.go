package caddymodule

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/policies"
)

// fakeRESP is an in-process server of the commands the homes directory
// sends: SET key val NX GET PX ms (as Redis 7), AUTH and SELECT.
type fakeRESP struct {
	ln       net.Listener
	mu       sync.Mutex
	kv       map[string]string
	commands []string
	password string
	// gate, when set, holds every SET's reply until it is closed.
	gate chan struct{}
}

func newFakeRESP(t *testing.T, password string) *fakeRESP {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fakeRESP{ln: ln, kv: map[string]string{}, password: password}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return f
}

func (f *fakeRESP) serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	authed := f.password == ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
		args := make([]string, n)
		for i := range args {
			l, _ := r.ReadString('\n')
			k, _ := strconv.Atoi(strings.TrimSpace(l[1:]))
			buf := make([]byte, k+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return
			}
			args[i] = string(buf[:k])
		}
		if n == 0 {
			return
		}
		args[0] = strings.ToUpper(args[0]) // go-redis writes its own commands in lower case
		f.mu.Lock()
		f.commands = append(f.commands, strings.Join(args, " "))
		reply := "-ERR unknown\r\n"
		switch {
		case args[0] == "AUTH":
			authed = len(args) == 2 && args[1] == f.password
			reply = map[bool]string{true: "+OK\r\n", false: "-WRONGPASS\r\n"}[authed]
		case !authed:
			reply = "-NOAUTH\r\n"
		case args[0] == "SELECT":
			reply = "+OK\r\n"
		case args[0] == "SET" && len(args) == 7 && args[3] == "NX" && args[4] == "GET" && args[5] == "PX":
			if old, ok := f.kv[args[1]]; ok {
				reply = fmt.Sprintf("$%d\r\n%s\r\n", len(old), old)
			} else {
				f.kv[args[1]] = args[2]
				reply = "$-1\r\n"
			}
		}
		gate := f.gate
		f.mu.Unlock()
		if gate != nil && args[0] == "SET" {
			<-gate
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// openedStore is the directory's own client.
func openedStore(d *redisHomes) *storeClient {
	s, _ := d.open()
	return s
}

func (f *fakeRESP) url() string { return "redis://" + f.ln.Addr().String() }

// TestHomesDirectoryAgrees proves two directory clients (two routers)
// agree through the store: the first claim wins for both, answers are
// cached for Home, and keys are namespaced by the prefix.
func TestHomesDirectoryAgrees(t *testing.T) {
	f := newFakeRESP(t, "")
	cfg := HomesDirectoryConfig{URL: f.url(), KeyPrefix: "t:", TTL: caddy.Duration(time.Minute), Timeout: caddy.Duration(time.Second)}
	a, err := newRedisHomes(cfg, nil)
	require.NoError(t, err)
	b, err := newRedisHomes(cfg, nil)
	require.NoError(t, err)
	agreed := 0
	for k := uint64(1); k <= 50; k++ {
		ha, ok := a.Claim(k, fmt.Sprintf("r%d:1", k%4))
		require.True(t, ok)
		hb, ok := b.Claim(k, fmt.Sprintf("r%d:1", (k+1)%4)) // b would choose elsewhere
		require.True(t, ok)
		require.Equal(t, ha, hb, "key %d", k)
		assert.Equal(t, fmt.Sprintf("r%d:1", k%4), ha, "the first claim wins")
		got, ok := b.Home(k)
		require.True(t, ok, "b learnt the home")
		assert.Equal(t, ha, got)
		agreed++
	}
	assert.Equal(t, 50, agreed)
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Contains(t, f.commands, "SET t:1 r1:1 NX GET PX 60000")
	assert.Len(t, f.kv, 50)
}

// TestHomesDirectoryDown proves an unreachable store makes Claim answer
// "not known" within the timeout, then leaves the store alone for a while
// without a round trip, and that a store that comes back is used again.
func TestHomesDirectoryDown(t *testing.T) {
	addr, err := netx.FreeAddr()
	require.NoError(t, err)
	d, err := newRedisHomes(HomesDirectoryConfig{URL: "redis://" + addr, KeyPrefix: "t:", TTL: caddy.Duration(time.Minute),
		Timeout: caddy.Duration(200 * time.Millisecond)}, nil)
	require.NoError(t, err)
	_, ok := d.Claim(1, "r1:1")
	assert.False(t, ok, "nothing listens")
	assert.Greater(t, openedStore(d).downUntil.Load(), time.Now().UnixNano(), "marked down")
	_, ok = d.Claim(2, "r1:1")
	assert.False(t, ok, "still down: not tried")

	// The store comes back on that address.
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	f := &fakeRESP{ln: ln, kv: map[string]string{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	defer ln.Close()
	openedStore(d).downUntil.Store(0) // the down period passed
	got, ok := d.Claim(3, "r2:1")
	assert.True(t, ok)
	assert.Equal(t, "r2:1", got)
}

// TestHomesDirectoryClaimsLater proves claims made off the request's path
// are bounded: with the store holding its replies, 100 claims leave 64
// out (one goroutine each) and drop 36 at once, the 64 answer when the
// store does, their answers are cached for Home, and nothing stays out
// but 16 idle connections.
func TestHomesDirectoryClaimsLater(t *testing.T) {
	f := newFakeRESP(t, "")
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate = gate
	f.mu.Unlock()
	d, err := newRedisHomes(HomesDirectoryConfig{URL: f.url(), KeyPrefix: "t:", TTL: caddy.Duration(time.Minute),
		Timeout: caddy.Duration(5 * time.Second)}, nil)
	require.NoError(t, err)
	dropped0 := testutil.ToFloat64(metricHomesClaims.WithLabelValues("dropped"))
	later0 := testutil.ToFloat64(metricHomesClaims.WithLabelValues("later"))
	goroutines := runtime.NumGoroutine()
	var answered, yours atomic.Int32
	for k := uint64(1); k <= 100; k++ {
		d.ClaimLater(k, "r1:1", func(home string, ok bool) {
			if ok && home == "r1:1" {
				yours.Add(1)
			}
			answered.Add(1)
		})
	}
	assert.Equal(t, 36.0, testutil.ToFloat64(metricHomesClaims.WithLabelValues("dropped"))-dropped0, "past 64 out, dropped")
	assert.Len(t, d.later, maxLaterClaims, "64 out")
	assert.Zero(t, answered.Load(), "none answered while the store holds its replies")
	close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for answered.Load() < maxLaterClaims && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.Equal(t, int32(maxLaterClaims), answered.Load())
	assert.Equal(t, int32(maxLaterClaims), yours.Load(), "every one recorded as this router's")
	assert.Equal(t, float64(maxLaterClaims), testutil.ToFloat64(metricHomesClaims.WithLabelValues("later"))-later0)
	for len(d.later) > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.Empty(t, d.later, "no claim out")
	home, ok := d.Home(1)
	assert.True(t, ok && home == "r1:1", "the answer is cached")
	_, ok = d.Home(100)
	assert.False(t, ok, "a dropped claim recorded nothing")
	// A claim's answer can come before its connection is back in the
	// pool (which then closes it past storeMaxIdle): wait for that.
	stats := openedStore(d).rdb.PoolStats()
	for (int(stats.IdleConns) > storeMaxIdle || stats.IdleConns != stats.TotalConns) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		stats = openedStore(d).rdb.PoolStats()
	}
	assert.LessOrEqual(t, int(stats.IdleConns), storeMaxIdle, "the burst's extra connections closed")
	assert.Equal(t, stats.IdleConns, stats.TotalConns, "no connection left in use")
	// What is left: the fake server's goroutine per open connection.
	for runtime.NumGoroutine() > goroutines+storeMaxIdle && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), goroutines+storeMaxIdle, "the claims' goroutines ended")
}

// TestHomesDirectoryAuth: a password in the URL is sent first; a wrong
// one fails the claim instead of writing.
func TestHomesDirectoryAuth(t *testing.T) {
	f := newFakeRESP(t, "s3cret")
	for _, tt := range []struct {
		pass string
		ok   bool
	}{{"s3cret", true}, {"wrong", false}} {
		u := strings.Replace(f.url(), "redis://", "redis://:"+tt.pass+"@", 1) + "/2"
		d, err := newRedisHomes(HomesDirectoryConfig{URL: u, KeyPrefix: "t:", TTL: caddy.Duration(time.Minute), Timeout: caddy.Duration(time.Second)}, nil)
		require.NoError(t, err)
		_, ok := d.Claim(7, "r:1")
		assert.Equal(t, tt.ok, ok, tt.pass)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	assert.Contains(t, f.commands, "SELECT 2")
	assert.Len(t, f.kv, 1)
}

func TestHomesDirectoryCaddyfile(t *testing.T) {
	var p LLMSelection
	require.NoError(t, p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`llm {
		homes_directory redis://127.0.0.1:6390/1 {
			key_prefix prod:
			ttl 10m
			timeout 20ms
		}
	}`)))
	require.NotNil(t, p.HomesDirectory)
	assert.Equal(t, HomesDirectoryConfig{URL: "redis://127.0.0.1:6390/1", KeyPrefix: "prod:", TTL: caddy.Duration(10 * time.Minute),
		Timeout: caddy.Duration(20 * time.Millisecond)}, *p.HomesDirectory)
	require.NoError(t, p.setup())
	assert.NotNil(t, p.opts.Directory, "the strategy gets the shared directory")

	var ps LLMSelection
	require.NoError(t, ps.UnmarshalCaddyfile(caddyfile.NewTestDispenser("llm {\n homes_directory shared_store {\n ttl 5m\n }\n}")))
	assert.Equal(t, HomesDirectoryConfig{SharedStore: true, TTL: caddy.Duration(5 * time.Minute)}, *ps.HomesDirectory)
	require.NoError(t, ps.setup())
	assert.NotNil(t, ps.sharedHomes, "bound at each pick")
	assert.ErrorContains(t, HomesDirectoryConfig{SharedStore: true, URL: "redis://x:1"}.validate(), "not both")
	for _, tt := range []struct{ in, want string }{
		{"llm {\n homes_directory\n}", "wrong argument count"},
		{"llm {\n homes_directory http://x\n}", "redis://"},
		{"llm {\n homes_directory redis://x:1/y\n}", "database"},
		{"llm {\n homes_directory redis://x:1 {\n ttl soon\n }\n}", "ttl"},
		{"llm {\n homes_directory redis://x:1 {\n colour blue\n }\n}", "unrecognized"},
	} {
		var p LLMSelection
		err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.in))
		if assert.Error(t, err, tt.in) {
			assert.Contains(t, err.Error(), tt.want, tt.in)
		}
	}
}

// TestHomesDirectoryRealServer runs the directory against a real Valkey or
// Redis server (redis-server or valkey-server on PATH; install with
// `apt-get install redis-server`, 7.0 or later): two routers' strategies
// share it, place new prefixes by their own load and agree on every one.
// It is skipped when no server is installed.
func TestHomesDirectoryRealServer(t *testing.T) {
	srv := startRedis(t)
	cfg := HomesDirectoryConfig{URL: srv.url(), KeyPrefix: "it:", TTL: caddy.Duration(time.Minute), Timeout: caddy.Duration(time.Second)}
	da, err := newRedisHomes(cfg, nil)
	require.NoError(t, err)
	db, err := newRedisHomes(cfg, nil)
	require.NoError(t, err)
	agreeOnHomes(t, da, db)
}

// agreeOnHomes has two routers' prefix_load strategies, over directories
// da and db of one store, place 100 new prefixes, each by its own load:
// they must agree on every one, and every prefix must go where the first
// router's load put it.
func agreeOnHomes(t *testing.T, da, db *redisHomes) {
	t.Helper()
	a, err := policies.NewStrategy("prefix_load", policies.Options{Peers: policies.PeersSome, Directory: da})
	require.NoError(t, err)
	b, err := policies.NewStrategy("prefix_load", policies.Options{Peers: policies.PeersSome, Directory: db})
	require.NoError(t, err)
	view := func(shift int) []policies.Replica {
		rs := make([]policies.Replica, 4)
		for i := range rs {
			rs[i] = policies.Replica{Addr: fmt.Sprintf("10.0.0.%d:8000", i+1), EngineWaiting: -1, EngineRunning: -1, KVUsage: -1,
				PendingPrefill: ((i + shift) % 4) * 10000}
		}
		return rs
	}
	ra, rb := view(0), view(2) // a's least loaded is replica 0, b's is replica 2
	agreed, byLoad := 0, 0
	later0 := testutil.ToFloat64(metricHomesClaims.WithLabelValues("later"))
	for k := uint64(1); k <= 100; k++ {
		keys := policies.Keys{Leading: k * 7919, Blocks: []uint64{k}, LeadingBlocks: 1, Bytes: 4000}
		pa := a.Pick(keys, ra)
		// b's request comes a round trip later: from the 64th key on a
		// sees nothing come back (a unique run) and claims off the path.
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, ok := da.Home(policies.HomeKey(keys)); ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		pb := b.Pick(keys, rb)
		require.Equal(t, pa, pb, "key %d", k)
		agreed++
		if pa == 0 {
			byLoad++
		}
	}
	assert.Equal(t, 100, agreed)
	assert.Equal(t, 100, byLoad, "every new prefix went where the first router's load put it")
	assert.Equal(t, 37.0, testutil.ToFloat64(metricHomesClaims.WithLabelValues("later"))-later0,
		"a claimed keys 64-100 off the path; b, told each time that a placed it, never")
}

// TestHomesDirectorySharedStore proves homes_directory shared_store keeps
// the homes in llm_route's store: before a request binds it the directory
// answers nothing (the router places on its own), bound to two
// instances' stores the routers agree on every new prefix, the keys sit
// under the store's prefix + "home:", and the directory opened no client
// of its own.
func TestHomesDirectorySharedStore(t *testing.T) {
	srv := startRedis(t)
	cfg := HomesDirectoryConfig{SharedStore: true, TTL: caddy.Duration(time.Minute)}
	da, err := newRedisHomes(cfg, nil)
	require.NoError(t, err)
	db, err := newRedisHomes(cfg, nil)
	require.NoError(t, err)
	_, ok := da.Claim(1, "r:1")
	assert.False(t, ok, "unbound: no store to ask")
	da.bindShared(openTestStore(t, srv.url(), "hs:", "a", time.Second))
	db.bindShared(openTestStore(t, srv.url(), "hs:", "b", time.Second))
	agreeOnHomes(t, da, db)
	assert.Nil(t, da.store, "no client of its own")
	assert.Nil(t, db.store, "no client of its own")
	keys, err := da.bound.Load().c.rdb.Keys(t.Context(), "hs:home:*").Result()
	require.NoError(t, err)
	assert.Len(t, keys, 100, "one home per prefix, under the store's prefix")
}

// TestHomesDirectorySharedStoreThroughCaddy proves the binding happens at
// the pick: a config whose lb_policy names homes_directory shared_store
// records a new prefix's home in llm_route's store.
func TestHomesDirectorySharedStoreThroughCaddy(t *testing.T) {
	srv := startRedis(t)
	a, b := newFake(t), newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		shared_store %s {
			key_prefix via:
		}
	}
	reverse_proxy %s %s {
		lb_policy llm {
			homes_directory shared_store
		}
	}`, srv.url(), a.addr, b.addr))
	resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody("you are a homes test", "first turn", false))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	resp.Body.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.addr()})
	t.Cleanup(func() { rdb.Close() })
	var keys []string
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for len(keys) == 0 && time.Now().Before(deadline) {
		keys, err = rdb.Keys(t.Context(), "via:home:*").Result()
		require.NoError(t, err)
		time.Sleep(10 * time.Millisecond)
	}
	require.Len(t, keys, 1, "the new prefix's home, in the shared store")
	home, err := rdb.Get(t.Context(), keys[0]).Result()
	require.NoError(t, err)
	assert.Contains(t, []string{a.addr, b.addr}, home)
	r.requireDrained(a.addr, b.addr)
}
