package caddymodule

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

// startSim runs a simulated replica on a loopback port: 4 output tokens,
// an engine fifty times faster than the simulator's standard one.
func startSim(t *testing.T, name string) (*simreplica.Server, string) {
	t.Helper()
	return startSimWith(t, name, 4, 50)
}

// startSimWith is startSim with outputTokens per answer and the engine's
// speed (simengine.Config.Speed).
func startSimWith(t *testing.T, name string, outputTokens int, speed float64) (*simreplica.Server, string) {
	t.Helper()
	return startSimAs(t, name, outputTokens, speed, simreplica.VLLM)
}

// startSimAs is startSimWith answering as engine p.
func startSimAs(t *testing.T, name string, outputTokens int, speed float64, p simreplica.Personality) (*simreplica.Server, string) {
	t.Helper()
	cfg := simreplica.Config{Name: name, OutputTokens: outputTokens, RestartDown: -1, Personality: p}
	cfg.Engine = simengine.DefaultConfig()
	cfg.Engine.Speed = speed
	s, err := simreplica.New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(func() { _ = s.Close() })
	return s, ln.Addr().String()
}

// TestEngineFeedbackWithSimulatedReplicas proves, against simulated
// engines, that engine metrics are scraped into the router state, that the
// prefix predictions are checked against the engine's cached tokens (and
// are right for a repeated system prompt), and that an engine restart is
// detected and purges that replica's index.
func TestEngineFeedbackWithSimulatedReplicas(t *testing.T) {
	s1, a1 := startSim(t, "sim-1")
	s2, a2 := startSim(t, "sim-2")
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		request_usage
		replica_header X-LLMRoute-Replica
	}
	reverse_proxy %s %s {
		lb_policy llm prefix_load {
			engine_metrics {
				interval 50ms
				timeout 500ms
			}
			# vLLM with --enable-prompt-tokens-details: its silence on the
			# cold first answer is 0 cached, so that one is checked too.
			cache_report always
		}
	}`, a1, a2))
	sys := strings.Repeat("You are a meticulous assistant who answers in short sentences. ", 30)
	served := map[string]int{}
	for i := range 6 {
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody(sys, fmt.Sprintf("question %d", i), true))
		served[resp.Header.Get("X-LLMRoute-Replica")]++
		_, done, err := readSSE(resp)
		require.NoError(t, err)
		require.True(t, done)
	}
	require.Len(t, served, 1, "one system prompt, low load: one home")
	var home string
	var homeSim *simreplica.Server
	for a := range served {
		home = a
	}
	homeSim = s1
	if home == a2 {
		homeSim = s2
	}
	// The handler checks a prediction as its request ends, which may be
	// just after the client read the last byte.
	waitFor(t, "six predictions checked", func() bool { return r.replica(home).Feedback.Checks == 6 })
	st := r.replica(home)
	assert.Equal(t, 6, st.Feedback.Checks)
	assert.Equal(t, 1, st.Feedback.Cold)
	assert.Equal(t, 5, st.Feedback.Hits, "repeated system prompt: predicted and reported cached")
	assert.InDelta(t, 1.0, st.Feedback.Precision, 1e-9)
	waitFor(t, "engine metrics scraped", func() bool {
		e := r.replica(home).Engine
		return e != nil && e.Engine == "vllm" && !e.Stale && e.NumBlocks > 0 && e.Queries > 0
	})
	entries := r.replica(home).IndexEntries
	require.Positive(t, entries)

	homeSim.Restart(0)
	waitFor(t, "restart detected and index purged", func() bool {
		s := r.replica(home)
		return s.IndexEntries == 0 && s.Feedback.Purges > 0
	})
	assert.Equal(t, "counters_reset", r.replica(home).Feedback.LastPurge)
	r.requireDrained(a1, a2)
}

// TestConcurrentPrefixNotAMiss proves, through Caddy, that a request sent
// while another of the same prefix is still before its first byte on the
// replica is checked as "concurrent" when the engine reports nothing
// cached (it was still computing that prefix), not as a miss; and that the
// same request sent after the first one ended is a miss.
func TestConcurrentPrefixNotAMiss(t *testing.T) {
	f := newFake(t) // JSON answers report cached_tokens 0
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		request_usage
	}
	reverse_proxy %s {
		lb_policy llm prefix_load
	}`, f.addr))
	sys := strings.Repeat("You are a meticulous assistant who answers in short sentences. ", 30)
	hold := make(chan struct{})
	f.setHold(hold)
	var wg sync.WaitGroup
	send := func(user string) {
		defer wg.Done()
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody(sys, user, false))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
	}
	wg.Add(1)
	go send("first")
	waitFor(t, "the first request held", func() bool { return f.cur.Load() == 1 })
	wg.Add(1)
	go send("second")
	waitFor(t, "the second request held", func() bool { return f.cur.Load() == 2 })
	close(hold)
	wg.Wait()
	waitFor(t, "both predictions checked", func() bool { return r.replica(f.addr).Feedback.Checks == 2 })
	fb := r.replica(f.addr).Feedback
	assert.Equal(t, 1, fb.Cold, "the first request: nothing believed")
	assert.Equal(t, 1, fb.Concurrent, "the second: believed from the first, which the engine was still computing")
	assert.Zero(t, fb.Misses)

	f.setHold(nil)
	wg.Add(1)
	send("third")
	waitFor(t, "the third prediction checked", func() bool { return r.replica(f.addr).Feedback.Checks == 3 })
	fb = r.replica(f.addr).Feedback
	assert.Equal(t, 1, fb.Misses, "believed, nothing pending, nothing cached: a miss")
	assert.Equal(t, 1, fb.Concurrent)
	r.requireDrained(f.addr)
}

// TestPartialCacheShrinksBelief proves, through Caddy against a simulated
// llama.cpp server (which reports no cache size) with a small cache, that
// a conversation whose turns the engine evicted while it kept the system
// prompt every request shares is checked as "partial", not as a hit (the
// engine did report cached tokens: the shared opening), and that the
// verdict shrinks the belief's index toward its reach, the blocks placed
// there since the conversation was.
func TestPartialCacheShrinksBelief(t *testing.T) {
	cfg := simreplica.Config{Name: "sim-small", OutputTokens: 4, RestartDown: -1, Personality: simreplica.LlamaCpp}
	cfg.Engine = simengine.DefaultConfig()
	cfg.Engine.Speed = 50
	cfg.Engine.NumBlocks, cfg.Engine.BlockSize = 64, 16 // 1,024 tokens
	cfg.Engine.MaxModelLen = 0
	sim, err := simreplica.New(cfg)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = sim.Serve(ln) }()
	t.Cleanup(func() { _ = sim.Close() })
	addr := ln.Addr().String()
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		request_usage
	}
	reverse_proxy %s {
		lb_policy llm prefix_load {
			index_blocks 1024
		}
	}`, addr))
	sys := strings.Repeat("You are a meticulous assistant who answers in short sentences. ", 12) // ~200 tokens
	turn := func(i int) string {
		return fmt.Sprintf("conversation %d: ", i) + strings.Repeat(fmt.Sprintf("tell me about topic %d in detail please. ", i), 45) // ~500 tokens
	}
	send := func(user string) {
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody(sys, user, false))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	// Conversation 0, then three others of the same system prompt: each
	// needs most of the cache, so the engine evicts conversation 0's turn
	// and keeps the system prompt, which every request touches.
	for i := range 4 {
		send(turn(i))
	}
	waitFor(t, "four predictions checked", func() bool { return r.replica(addr).Feedback.Checks == 4 })
	before := r.replica(addr)
	require.Zero(t, before.Feedback.Partials, "nothing evicted was believed yet: %s", before.Feedback)
	send(turn(0))
	waitFor(t, "the fifth prediction checked", func() bool { return r.replica(addr).Feedback.Checks == 5 })
	after := r.replica(addr)
	assert.Equal(t, 1, after.Feedback.Partials, "conversation 0 again: believed whole, the engine had its system prompt only: %s", after.Feedback)
	assert.Zero(t, after.Feedback.Misses, "the engine had some of it: no miss")
	// The partial's reach is the three conversations placed since (about
	// 50 blocks; the index counts it in generations of 1/256 of its 1,024
	// blocks), far under the index: it halves it (at most half a verdict),
	// where a miss or a partial without a reach takes 1/8.
	assert.Equal(t, before.IndexCapacity/2, after.IndexCapacity, "a partial shrinks the index toward its reach")
	mresp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", r.admin))
	require.NoError(t, err)
	metrics, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	assert.Contains(t, string(metrics), fmt.Sprintf("llmroute_index_capacity{replica=%q} %d\n", addr, after.IndexCapacity), "the operator sees what the router learned")
	assert.Less(t, after.Feedback.Precision, 1.0)
	r.requireDrained(addr)
}

// TestBlockSizeSizesIndex proves, through Caddy against a simulated engine
// that reports its cache size, that the index sized from the engine counts
// in llm_route's own block_size: the engine's cache (blocks x tokens per
// block x ~4 bytes) is half as many 128-byte blocks as 64-byte ones.
func TestBlockSizeSizesIndex(t *testing.T) {
	eng := simengine.DefaultConfig()
	cacheBytes := eng.NumBlocks * eng.BlockSize * policies.BytesPerToken
	for _, bs := range []int{64, 128} {
		t.Run(fmt.Sprint(bs), func(t *testing.T) {
			_, addr := startSim(t, fmt.Sprintf("sim-bs-%d", bs))
			r := startRouter(t, fmt.Sprintf(`
	llm_route {
		block_size %d
	}
	reverse_proxy %s {
		lb_policy llm prefix_load {
			engine_metrics {
				interval 50ms
			}
		}
	}`, bs, addr))
			resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody(strings.Repeat("system prompt ", 40), "hi", false))
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			want := cacheBytes / bs
			var got int
			waitFor(t, "the index sized from the engine", func() bool {
				st := r.replica(addr)
				got = st.IndexCapacity
				return st.Feedback.FromEngine && got == want
			})
			assert.Equal(t, want, got)
			assert.Equal(t, want, r.replica(addr).Feedback.MaxIndex)
		})
	}
}

// TestPeerSenseSurvivesReloadThroughCaddy proves, through Caddy and two
// simulated engines whose metrics it scrapes, that a lone router learns it
// is the engines' only client (it assumes peers when it starts) and that a
// reload of the same upstreams keeps that: the new configuration's first
// request already routes as a lone router.
func TestPeerSenseSurvivesReloadThroughCaddy(t *testing.T) {
	// Requests long next to the 20 ms scrape interval.
	_, a1 := startSimWith(t, "sim-1", 16, 5)
	_, a2 := startSimWith(t, "sim-2", 16, 5)
	site := func(maxInFlight int) string {
		return fmt.Sprintf(`
	llm_route
	reverse_proxy %s %s {
		lb_policy llm prefix_load {
			max_in_flight %d
			engine_metrics {
				interval 20ms
				timeout 500ms
			}
		}
	}`, a1, a2, maxInFlight)
	}
	r := startRouter(t, site(32))
	peers := func() string {
		st := r.state()
		require.Len(t, st.Policies, 1)
		return st.Policies[0].Peers
	}
	require.Equal(t, "some", peers(), "a fresh router assumes peers")
	sys := strings.Repeat("You answer in short sentences. ", 20)
	// Six clients, each sending its next request when its last one ends:
	// a steady load the engines' metrics can agree with.
	var sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for j := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post(r.url("/v1/chat/completions"), "application/json",
					strings.NewReader(chatBody(sys, fmt.Sprintf("question %d-%d", j, i), false)))
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				sent.Add(1)
			}
		}()
	}
	deadline := time.Now().Add(15 * time.Second)
	for peers() == "some" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	require.Equal(t, "none", peers(), "alone after %d requests", sent.Load())

	r.load(site(16))
	resp := doAfterReload(t, func() *http.Request {
		req, err := http.NewRequest(http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(chatBody(sys, "after the reload", false)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		return req
	})
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	st := r.state()
	require.Len(t, st.Policies, 1)
	assert.Equal(t, 16, st.Policies[0].MaxInFlight, "the new configuration")
	assert.Equal(t, "none", st.Policies[0].Peers, "what it learned survived the reload")
	r.requireDrained(a1, a2)
}

// TestQueuedHomesFromFeedback proves, through Caddy against a simulated
// llama.cpp engine (which reports cached tokens), that the engine's report
// on a new prefix sent to its rendezvous home reaches prefix_load's
// homeFinds: prompts another client
// put in the engine's cache, new to this router, found there, turn on
// queued_homes in the state; prompts nobody sent before leave it off.
func TestQueuedHomesFromFeedback(t *testing.T) {
	_, addr := startSimAs(t, "sim-homes", 4, 50, simreplica.LlamaCpp) // it reports cached tokens
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		request_usage
	}
	reverse_proxy %s {
		lb_policy llm prefix_load {
			peers some
		}
	}`, addr))
	prompt := func(i int) string {
		return fmt.Sprintf("document %d: ", i) + strings.Repeat(fmt.Sprintf("the facts of case %d, set out at length. ", i), 30)
	}
	send := func(url, user string) {
		resp := post(t, url, "", "", "", chatBody("", user, false))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	queued := func() bool {
		st := r.state()
		require.Len(t, st.Policies, 1)
		require.Equal(t, "home", st.Policies[0].NewPrefixes)
		return st.Policies[0].QueuedHomes
	}
	// Prompts nobody sent before: their home has nothing of them.
	for i := range 24 {
		send(r.url("/v1/chat/completions"), prompt(i))
	}
	waitFor(t, "24 predictions checked", func() bool { return r.replica(addr).Feedback.Checks == 24 })
	assert.False(t, queued(), "new prefixes found nothing at home")

	// Another client (straight to the engine) sent these first.
	for i := 100; i < 124; i++ {
		send("http://"+addr+"/v1/chat/completions", prompt(i))
	}
	for i := 100; i < 124; i++ {
		send(r.url("/v1/chat/completions"), prompt(i))
	}
	waitFor(t, "48 predictions checked", func() bool { return r.replica(addr).Feedback.Checks == 48 })
	assert.True(t, queued(), "new prefixes found their prompt at home: the bet pays")
	r.requireDrained(addr)
}
