package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
)

// tenantState returns name's entry in the router's state.
func (r *router) tenantState(name string) stateapi.Tenant {
	r.t.Helper()
	ts, ok := r.state().Tenant(name)
	require.True(r.t, ok, "tenant %s in the state", name)
	return ts
}

// TestTenantNamedNeverItsKey proves how a request is named: {llm.tenant}
// and {llm.priority} carry the tenant and its band; X-LLMRoute-Priority
// lowers the band, never raises it above the tenant's ceiling, names no
// band at its peril (400), and does not reach the replica; the metrics
// carry the tenant's name and never a key.
func TestTenantNamedNeverItsKey(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	header >X-Tenant {llm.tenant}
	header >X-Priority {llm.priority}
	llm_route {
		api_keys sk-tn-plain
		tenant tn-alice {
			keys sk-tn-alice
			priority critical
		}
		tenant tn-batch {
			keys sk-tn-batch
			priority sheddable
		}
	}
	reverse_proxy %s {
		lb_policy llm {
			sheddable_share 1
		}
	}`, f.addr))
	url := r.url("/v1/chat/completions")
	for _, tc := range []struct {
		key, asked       string
		tenant, priority string
	}{
		{"sk-tn-alice", "", "tn-alice", "critical"},
		{"sk-tn-alice", "standard", "tn-alice", "standard"},
		{"sk-tn-alice", "Sheddable", "tn-alice", "sheddable"},
		{"sk-tn-batch", "critical", "tn-batch", "sheddable"},
		{"sk-tn-plain", "", "default", "standard"},
		{"sk-tn-plain", "critical", "default", "standard"},
	} {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(chatBody("s", "hi", false)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tc.key)
		req.Header.Set("Content-Type", "application/json")
		if tc.asked != "" {
			req.Header.Set(priorityHeader, tc.asked)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, tc.tenant, resp.Header.Get("X-Tenant"), "%+v", tc)
		assert.Equal(t, tc.priority, resp.Header.Get("X-Priority"), "%+v", tc)
		_, hdr, _ := f.last()
		assert.Empty(t, hdr.Get(priorityHeader), "the priority header is not forwarded")
	}

	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(chatBody("s", "hi", false)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer sk-tn-alice")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(priorityHeader, "urgent")
	before := f.total.Load()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	assert.Equal(t, 400, resp.StatusCode)
	_, code := apiErr(t, resp)
	assert.Equal(t, "invalid_priority", code)
	assert.Equal(t, before, f.total.Load())

	metrics := adminGet(t, r, "/metrics")
	assert.Contains(t, metrics, `llmroute_tenant_requests_total{priority="critical",tenant="tn-alice"} 1`)
	assert.Contains(t, metrics, `llmroute_tenant_requests_total{priority="sheddable",tenant="tn-batch"} 1`)
	assert.NotContains(t, metrics, "sk-tn-")
	assert.Zero(t, r.tenantState("tn-alice").Reservations)
}

// adminGet returns the body of a GET on the router's admin API.
func adminGet(t *testing.T, r *router, path string) string {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", r.admin, path))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// TestTokensChargedFromUsage proves what a request is charged: a stream
// with the engine's usage is charged that usage (prompt + completion); a
// request past the budget gets 429 rate_limit_exceeded with Retry-After
// and never reaches the replica; a stream cut midway, which reported no
// usage, is charged its prompt estimate and a token per chunk it streamed.
func TestTokensChargedFromUsage(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		request_usage
		tenant tc-a {
			keys sk-tc-a
			tokens_per_minute 100
		}
		tenant tc-b {
			keys sk-tc-b
		}
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	url := r.url("/v1/chat/completions")
	resp := post(t, url, "sk-tc-a", "tc-1", "", chatBody("s", "hi", true))
	_, done, err := readSSE(resp)
	require.NoError(t, err)
	require.True(t, done)
	waitFor(t, "the stream settled", func() bool { return r.tenantState("tc-a").Reservations == 0 })
	st := r.tenantState("tc-a")
	assert.Equal(t, 41.0, st.TokensCharged, "the fake's usage: 40 prompt + 1 completion")
	assert.Greater(t, st.EstimatedExcess, 20.0, "the usage beyond the prompt estimate is learned")

	// 59 left: the next estimate (the prompt and the learned excess: 41)
	// fits once, the one after does not.
	resp = post(t, url, "sk-tc-a", "tc-2", "", chatBody("s", "hi", false))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	before := f.total.Load()
	resp = post(t, url, "sk-tc-a", "tc-3", "", chatBody("s", "hi", false))
	require.Equal(t, 429, resp.StatusCode)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	typ, code := apiErr(t, resp)
	assert.Equal(t, "tokens", typ)
	assert.Equal(t, "rate_limit_exceeded", code)
	assert.Equal(t, before, f.total.Load(), "refused before any replica")
	st = r.tenantState("tc-a")
	assert.Equal(t, 82.0, st.TokensCharged, "charged exactly the usage of what ran")
	assert.LessOrEqual(t, st.TokensCharged, 100.0, "this workload's estimate is exact: never over")
	metrics := adminGet(t, r, "/metrics")
	assert.Contains(t, metrics, `llmroute_tenant_rejected_total{reason="tokens_per_minute",tenant="tc-a"} 1`)

	resp = post(t, url, "sk-tc-b", "tc-cut", "cut", chatBody("s", "hi", true))
	lines, done, _ := readSSE(resp)
	assert.False(t, done)
	assert.Len(t, lines, 3)
	waitFor(t, "the cut stream settled", func() bool { return r.tenantState("tc-b").Reservations == 0 })
	// Charged its prompt estimate (at 4 bytes per token of its canonical
	// rendering: 41 tokens of usage less the excess the first request
	// taught, which it set exactly) plus the 3 chunks it streamed.
	promptEst := 41 - st.EstimatedExcess
	assert.Greater(t, promptEst, 4.0)
	assert.Equal(t, promptEst+3, r.tenantState("tc-b").TokensCharged)
	r.requireDrained(f.addr)
}
