package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitFor polls cond (bounded) and fails the test if it never holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCapHoldsUnderBurst proves that the per-replica cap holds when many
// requests select at once: 200 concurrent requests, cap 4, two replicas;
// never more than 4 in flight at either, every request served, none lost,
// nothing leaked.
func TestCapHoldsUnderBurst(t *testing.T) {
	a, b := newFake(t), newFake(t)
	hold := make(chan struct{})
	a.setHold(hold)
	b.setHold(hold)
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s %s {
		lb_policy llm {
			max_in_flight 4
			queue_size 500
			queue_timeout 20s
		}
	}`, a.addr, b.addr))
	const n = 200
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Half share one prefix, half are distinct: both paths.
			sys := "shared system prompt " + strings.Repeat("s", 300)
			if i%2 == 1 {
				sys = fmt.Sprintf("tenant %d %s", i, strings.Repeat("t", 300))
			}
			resp := post(t, r.url("/v1/chat/completions"), "", fmt.Sprintf("burst-%d", i), "", chatBody(sys, "q", false))
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	waitFor(t, "both replicas at their cap with a queue", func() bool {
		return a.cur.Load() == 4 && b.cur.Load() == 4 && r.state().Queued > 0
	})
	close(hold)
	wg.Wait()
	for i, c := range codes {
		require.Equal(t, 200, c, "request %d", i)
	}
	assert.LessOrEqual(t, a.max.Load(), int64(4))
	assert.LessOrEqual(t, b.max.Load(), int64(4))
	assert.Equal(t, int64(n), a.total.Load()+b.total.Load(), "every request sent exactly once")
	r.requireDrained(a.addr, b.addr)
	assert.Equal(t, 0, r.state().Queued)
}

// TestQueueOverflowAndTimeout proves the bounded queue: when the only slot
// is taken, one request waits, the next finds the queue full (429 +
// Retry-After), and the waiting one times out (429 + Retry-After).
func TestQueueOverflowAndTimeout(t *testing.T) {
	f := newFake(t)
	hold := make(chan struct{})
	f.setHold(hold)
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s {
		lb_policy llm {
			max_in_flight 1
			queue_size 1
			queue_timeout 400ms
		}
	}`, f.addr))
	url := r.url("/v1/chat/completions")
	first := make(chan int, 1)
	go func() {
		resp := post(t, url, "", "q-1", "", chatBody("s", "1", false))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		first <- resp.StatusCode
	}()
	waitFor(t, "first request at the replica", func() bool { return f.cur.Load() == 1 })
	second := make(chan *http.Response, 1)
	go func() { second <- post(t, url, "", "q-2", "", chatBody("s", "2", false)) }()
	waitFor(t, "second request queued", func() bool { return r.state().Queued == 1 })

	resp := post(t, url, "", "q-3", "", chatBody("s", "3", false))
	assert.Equal(t, 429, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	_, code := apiErr(t, resp)
	assert.Equal(t, "queue_full", code)

	resp = <-second
	assert.Equal(t, 429, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	_, code = apiErr(t, resp)
	assert.Equal(t, "queue_timeout", code)

	close(hold)
	assert.Equal(t, 200, <-first)
	assert.Equal(t, 0, f.count("q-2")+f.count("q-3"), "refused requests reached the replica")
	r.requireDrained(f.addr)
}

// TestCoolingAndProbe proves that a 503 with Retry-After cools the replica,
// that while every replica cools the router answers 503 + Retry-After
// itself, and that after the cooldown exactly one probe goes through before
// the replica is trusted again.
func TestCoolingAndProbe(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s {
		lb_policy llm {
			cooldown 300ms 300ms
			queue_timeout 5s
		}
	}`, f.addr))
	url := r.url("/v1/chat/completions")
	resp := post(t, url, "", "c-1", "503", chatBody("s", "1", false))
	assert.Equal(t, 503, resp.StatusCode, "the replica's own 503 is relayed")
	resp.Body.Close()
	st := r.replica(f.addr)
	require.True(t, st.Cooling)
	assert.Equal(t, "503", st.CoolReason)

	resp = post(t, url, "", "c-2", "", chatBody("s", "2", false))
	assert.Equal(t, 503, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	_, code := apiErr(t, resp)
	assert.Equal(t, "no_healthy_replica", code)
	assert.Equal(t, 0, f.count("c-2"))

	waitFor(t, "cooldown to end", func() bool { return !r.replica(f.addr).Cooling })
	hold := make(chan struct{})
	f.setHold(hold)
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, url, "", fmt.Sprintf("p-%d", i), "", chatBody("s", "p", false))
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	waitFor(t, "probe in flight and others queued", func() bool {
		s := r.state()
		return f.cur.Load() == 1 && s.Queued == 2
	})
	assert.True(t, r.replica(f.addr).Probing)
	// The queue moves only when a pass runs (an arrival, a release, a
	// cooldown's end): run one that attempts every waiter, to its end.
	// Whatever a later wake could admit, this one admits, and an admitted
	// request holds its slot before the pass ends.
	waiters.waitPass(context.Background(), waiters.kick(true, false))
	st = r.replica(f.addr)
	assert.Equal(t, 1, st.InFlight, "only the probe may hold a slot after its cooldown")
	assert.Equal(t, 2, r.state().Queued)
	assert.Equal(t, int64(1), f.cur.Load(), "only the probe may reach a replica after its cooldown")
	close(hold)
	wg.Wait()
	assert.Equal(t, []int{200, 200, 200}, codes)
	st = r.replica(f.addr)
	assert.False(t, st.NeedProbe)
	assert.Equal(t, 0, st.Failures)
	r.requireDrained(f.addr)
}

// TestRetryMovesToUntriedReplica proves that a 429 answer is retried, before
// any byte reaches the client, on a replica the request has not tried, and
// that the rate-limited replica cools down for its Retry-After.
func TestRetryMovesToUntriedReplica(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.setFault("429")
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		replica_header X-LLMRoute-Replica
	}
	reverse_proxy %s %s {
		lb_policy llm round_robin {
			cooldown 1s 10s
		}
		lb_retries 2
		lb_retry_match {
			expression `+"`{rp.status_code} in [429, 503]`"+`
		}
	}`, a.addr, b.addr))
	url := r.url("/v1/chat/completions")
	for i := range 4 {
		id := fmt.Sprintf("r-%d", i)
		resp := post(t, url, "", id, "", chatBody("s", id, false))
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, string(body))
		assert.Equal(t, b.addr, resp.Header.Get("X-LLMRoute-Replica"))
		assert.Equal(t, 1, b.count(id))
		assert.LessOrEqual(t, a.count(id), 1, "a replica got the same request twice")
	}
	assert.Equal(t, int64(1), a.total.Load(), "the cooling replica was tried again")
	st := r.replica(a.addr)
	assert.True(t, st.Cooling)
	assert.Equal(t, "429", st.CoolReason)
	require.NotNil(t, st.CoolUntil)
	assert.Greater(t, time.Until(*st.CoolUntil), 500*time.Millisecond, "Retry-After: 2 was not honoured")
	r.requireDrained(a.addr, b.addr)
}

// TestReplicaDiesMidStream proves that a stream the replica cuts is shown
// to the client as broken (no [DONE], a read error), is not retried after
// its first byte, releases its reservation, and cools the replica.
func TestReplicaDiesMidStream(t *testing.T) {
	a, b := newFake(t), newFake(t)
	a.setFault("cut")
	b.setFault("cut")
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s %s {
		lb_policy llm
		lb_retries 2
		lb_retry_match {
			expression `+"`{rp.is_transport_error} == true`"+`
		}
	}`, a.addr, b.addr))
	resp := post(t, r.url("/v1/chat/completions"), "", "cut-1", "", chatBody("s", "x", true))
	require.Equal(t, 200, resp.StatusCode)
	lines, done, err := readSSE(resp)
	assert.False(t, done, "a cut stream was presented as complete")
	assert.Error(t, err, "the client must see the stream break")
	assert.NotEmpty(t, lines)
	assert.Equal(t, 1, a.count("cut-1")+b.count("cut-1"), "retried after the first byte")
	r.requireDrained(a.addr, b.addr)
	cooled := 0
	for _, s := range r.state().Replicas {
		if (s.Addr == a.addr || s.Addr == b.addr) && s.Cooling {
			assert.Equal(t, "stream_broken", s.CoolReason)
			cooled++
		}
	}
	assert.Equal(t, 1, cooled)
}

// TestClientDisconnectCancelsUpstream proves that a client leaving
// mid-stream cancels the upstream request, releases the reservation and
// does not blame the replica.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	f := newFake(t)
	f.setFault("slow")
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(chatBody("s", "x", true)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	buf := make([]byte, 16)
	_, err = resp.Body.Read(buf)
	require.NoError(t, err)
	cancel()
	resp.Body.Close()
	waitFor(t, "upstream cancellation", func() bool { return f.canceled.Load() == 1 })
	r.requireDrained(f.addr)
	st := r.replica(f.addr)
	assert.False(t, st.Cooling, "a client leaving is not the replica's fault")
	assert.Equal(t, 0, st.Failures)
}

// TestReloadDuringStream proves that a config reload (strategy change) in
// the middle of a stream lets the stream complete, carries reservations
// over without leak or double count, and keeps the residency index.
func TestReloadDuringStream(t *testing.T) {
	f := newFake(t)
	f.setFault("slow")
	site := func(strategy string) string {
		return fmt.Sprintf(`
	llm_route
	reverse_proxy %s {
		lb_policy llm %s
	}`, f.addr, strategy)
	}
	r := startRouter(t, site("prefix_load"))
	resp := post(t, r.url("/v1/chat/completions"), "", "reload-1", "", chatBody(strings.Repeat("system ", 100), "x", true))
	require.Equal(t, 200, resp.StatusCode)
	waitFor(t, "stream in flight", func() bool { return r.replica(f.addr).InFlight == 1 })
	entries := r.replica(f.addr).IndexEntries
	require.Positive(t, entries)
	r.load(site("least_load"))
	assert.Equal(t, 1, r.replica(f.addr).InFlight, "reservation lost or doubled by the reload")
	_, done, err := readSSE(resp)
	require.NoError(t, err)
	assert.True(t, done, "the stream did not complete across the reload")
	r.requireDrained(f.addr)
	// The stream's answer joins the index when it ends (index_answers).
	assert.GreaterOrEqual(t, r.replica(f.addr).IndexEntries, entries, "index lost across the reload")
	assert.Equal(t, 1, f.count("reload-1"))
}

// TestMetricsExposed proves the router's metrics appear in Caddy's /metrics
// after traffic, and that a refusal because the upstream set is empty
// (no_replicas) is counted in llmroute_admission_rejected_total.
func TestMetricsExposed(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	handle_path /empty/* {
		llm_route
		# A dynamic source with no sources yields an empty upstream set.
		reverse_proxy {
			dynamic multi
			lb_policy llm
		}
	}
	handle {
		llm_route
		reverse_proxy %s {
			lb_policy llm
		}
	}`, f.addr))
	resp := post(t, r.url("/v1/chat/completions"), "", "", "", chatBody("s", "x", false))
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	rejected := counterValue(t, metricRejected.WithLabelValues("no_replicas"))
	resp = post(t, r.url("/empty/v1/chat/completions"), "", "", "", chatBody("s", "x", false))
	assert.Equal(t, 503, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	_, code := apiErr(t, resp)
	assert.Equal(t, "no_replicas", code)
	assert.Equal(t, rejected+1, counterValue(t, metricRejected.WithLabelValues("no_replicas")), "the no_replicas refusal must be counted once")
	mresp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", r.admin))
	require.NoError(t, err)
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	for _, name := range []string{"llmroute_requests_total", "llmroute_in_flight", "llmroute_decision_seconds", "llmroute_time_to_first_byte_seconds", "llmroute_index_entries", "llmroute_index_capacity",
		`llmroute_admission_rejected_total{reason="no_replicas"}`} {
		assert.Contains(t, string(body), name)
	}
}

// counterValue reads a counter's current value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.GetCounter().GetValue()
}

// TestRefusedAndFailStatus proves a refused connection is retried on
// another replica before any byte reaches the client and cools the refusing
// replica ("transport"), and that a status listed in fail_status cools the
// replica that answered it (with status_fails 1: at the first such answer)
// while unlisted 4xx do not.
func TestRefusedAndFailStatus(t *testing.T) {
	dead := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	live := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s %s {
		lb_policy llm round_robin {
			cooldown 1s 30s {
				fail_status 500
				status_fails 1
			}
		}
		lb_retries 1
	}`, dead, live.addr))
	for i := range 3 {
		resp := post(t, r.url("/v1/chat/completions"), "", fmt.Sprint("ref-", i), "", chatBody("s", "x", false))
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
	}
	st := r.replica(dead)
	assert.True(t, st.Cooling)
	assert.Equal(t, "transport", st.CoolReason)
	assert.Equal(t, 1, st.Failures, "a cooling replica was dialled again")

	resp := post(t, r.url("/v1/chat/completions"), "", "", "500", chatBody("s", "x", false))
	resp.Body.Close()
	assert.Equal(t, 500, resp.StatusCode)
	assert.Equal(t, "5xx", r.replica(live.addr).CoolReason)
	r.requireDrained(dead, live.addr)
}
