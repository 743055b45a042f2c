package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCleanedUpConfigKeepsKeysAndBudgets proves a request that reaches
// an old config's handler after a reload cleaned it up (it was being read
// as the reload happened) meets the same keys and budgets as before: its
// key names its tenant, the tenant's requests_per_minute still holds, a
// wrong key is still refused; and a second Cleanup drops nothing more.
func TestCleanedUpConfigKeepsKeysAndBudgets(t *testing.T) {
	clk := clockwork.NewFakeClock()
	h := provisionedTenants(t, &LLMRoute{APIKeys: []string{"sk-cu-plain"}, Tenants: map[string]*Tenant{
		"cu-a": {Keys: []string{"sk-cu-a"}, RequestsPerMinute: 1},
	}}, clk)
	newer := provisionedTenants(t, &LLMRoute{APIKeys: []string{"sk-cu-plain"}, Tenants: map[string]*Tenant{
		"cu-a": {Keys: []string{"sk-cu-a"}, RequestsPerMinute: 1},
	}}, clk)
	require.NoError(t, h.Cleanup()) // the reload: the old config goes
	req := func(key string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		return r
	}
	for _, key := range []string{"sk-cu-a", "sk-cu-plain"} {
		ts, ok := h.tenantOf(req(key))
		require.True(t, ok, key)
		require.NotNil(t, ts, "%s: the cleaned-up handler lost its tenants: no budget applies", key)
	}
	_, ok := h.tenantOf(req("sk-cu-wrong"))
	assert.False(t, ok)
	ts, _ := h.tenantOf(req("sk-cu-a"))
	nts, _ := newer.tenantOf(req("sk-cu-a"))
	assert.Same(t, nts, ts, "one state for the tenant across both configs")
	tk, _, _ := ts.reserve(0, false)
	require.NotNil(t, tk)
	again, why, _ := ts.reserve(0, false)
	assert.Nil(t, again, "the budget holds for the old config's request")
	assert.Equal(t, reasonRPM, why)
	ts.settle(tk, true, 0, false)

	refs, _ := tenantStates.References("cu-a")
	require.NoError(t, h.Cleanup())
	after, _ := tenantStates.References("cu-a")
	assert.Equal(t, refs, after, "a second Cleanup dropped the newer config's reference")
}
