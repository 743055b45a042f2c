package caddymodule

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/admission"
)

// provisionedTenants returns a handler whose keys and tenants are set up
// as Provision does, released when the test ends.
func provisionedTenants(t *testing.T, h *LLMRoute, clk clockwork.Clock) *LLMRoute {
	t.Helper()
	repl := caddy.NewReplacer()
	require.NoError(t, h.resolveKeys(repl))
	require.NoError(t, h.provisionTenants(repl, clk))
	t.Cleanup(func() { _ = h.Cleanup() })
	return h
}

// TestKeysNameTheirTenant proves the key -> tenant resolution: each key
// (Bearer or X-Api-Key) names its own tenant, api_keys name the default
// one, anything else is refused; the tenants carry their settings.
func TestKeysNameTheirTenant(t *testing.T) {
	t.Setenv("TENANT_TEST_BOB", "sk-bob")
	h := provisionedTenants(t, &LLMRoute{
		APIKeys: []string{"sk-plain"},
		Tenants: map[string]*Tenant{
			"kt-alice": {Keys: []string{"sk-alice", "sk-alice-2"}, Weight: 2, Priority: "critical", MaxInFlight: 16},
			"kt-bob":   {Keys: []string{"{env.TENANT_TEST_BOB}"}, Priority: "sheddable", RequestsPerMinute: 60},
		},
	}, clockwork.NewFakeClock())
	for _, tc := range []struct {
		hdr, val string
		want     string // "" refused
	}{
		{"Authorization", "Bearer sk-alice", "kt-alice"},
		{"Authorization", "bearer  sk-alice-2", "kt-alice"},
		{"X-Api-Key", "sk-bob", "kt-bob"},
		{"Authorization", "Bearer sk-plain", defaultTenant},
		{"Authorization", "Bearer sk-alic", ""},
		{"Authorization", "Bearer {env.TENANT_TEST_BOB}", ""},
		{"", "", ""},
	} {
		r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		if tc.hdr != "" {
			r.Header.Set(tc.hdr, tc.val)
		}
		ts, ok := h.tenantOf(r)
		if tc.want == "" {
			assert.False(t, ok, "%s: %s", tc.hdr, tc.val)
			continue
		}
		require.True(t, ok, "%s: %s", tc.hdr, tc.val)
		assert.Equal(t, tc.want, ts.name)
	}
	alice := h.tenants[1]
	require.Equal(t, "kt-alice", alice.name)
	assert.Equal(t, tenantLimits{weight: 2, ceiling: admission.Critical, maxInFlight: 16}, alice.limits())
	st, ok := waiters.q.Stats("kt-alice")
	require.True(t, ok)
	assert.Equal(t, admission.Flow{Weight: 2, MaxInFlight: 16}, st.Flow, "the queue has the tenant's weight and cap")
}

// TestTenantConfigErrors covers what Provision refuses.
func TestTenantConfigErrors(t *testing.T) {
	for name, h := range map[string]*LLMRoute{
		"a key in two tenants":     {Tenants: map[string]*Tenant{"x": {Keys: []string{"k1"}}, "y": {Keys: []string{"k1"}}}},
		"a tenant key in api_keys": {APIKeys: []string{"k1"}, Tenants: map[string]*Tenant{"x": {Keys: []string{"k1"}}}},
		"no keys":                  {Tenants: map[string]*Tenant{"x": {Weight: 1}}},
		"bad priority":             {Tenants: map[string]*Tenant{"x": {Keys: []string{"k"}, Priority: "urgent"}}},
		"negative weight":          {Tenants: map[string]*Tenant{"x": {Keys: []string{"k"}, Weight: -1}}},
		"bad name":                 {Tenants: map[string]*Tenant{"a b": {Keys: []string{"k"}}}},
		"empty key":                {Tenants: map[string]*Tenant{"x": {Keys: []string{"{env.TENANT_TEST_UNSET}"}}}},
	} {
		repl := caddy.NewReplacer()
		require.NoError(t, h.resolveKeys(repl), name)
		err := h.provisionTenants(repl, clockwork.NewFakeClock())
		assert.Error(t, err, name)
		assert.Empty(t, h.tenants, "%s: nothing registered", name)
		assert.NotContains(t, err.Error(), "k1", "%s: the message names no key", name)
	}
}

// TestNewestConfigDecides proves the hand-off of a tenant's settings
// across reloads: the newest live config's settings are the tenant's (a
// PATCH takes effect at once), a config that goes away hands back to the
// one before it, and the budget spent survives.
func TestNewestConfigDecides(t *testing.T) {
	clk := clockwork.NewFakeClock()
	old := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{
		"nc-a": {Keys: []string{"sk-nc"}, Weight: 1, RequestsPerMinute: 10},
	}}, clk)
	ts := old.tenants[1]
	for range 4 {
		tk, _, _ := ts.reserve(0, false)
		require.NotNil(t, tk)
		ts.settle(tk, true, 0, false)
	}
	newer := &LLMRoute{Tenants: map[string]*Tenant{
		"nc-a": {Keys: []string{"sk-nc"}, Weight: 3, MaxInFlight: 2, RequestsPerMinute: 20},
	}}
	provisionedTenants(t, newer, clk)
	require.Same(t, ts, newer.tenants[1], "one state per tenant name")
	assert.Equal(t, 3.0, ts.limits().weight)
	assert.InDelta(t, 16, ts.status().RequestsLeft, 1e-9, "4 spent of the raised 20")
	st, _ := waiters.q.Stats("nc-a")
	assert.Equal(t, admission.Flow{Weight: 3, MaxInFlight: 2}, st.Flow)

	// The old config's Cleanup: the newer settings stay.
	require.NoError(t, old.Cleanup())
	assert.Equal(t, 3.0, ts.limits().weight)
	// A newer config that fails after Provision is cleaned up: back to it.
	failed := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{
		"nc-a": {Keys: []string{"sk-nc"}, Weight: 9},
	}}, clk)
	assert.Equal(t, 9.0, ts.limits().weight)
	require.NoError(t, failed.Cleanup())
	assert.Equal(t, 3.0, ts.limits().weight)
	assert.Equal(t, 20, ts.limits().rpm)
}

// TestBudgetsOnTheInjectedClock proves the per-minute budgets through the
// tenant state: requests past requests_per_minute are refused with the
// wait until one fits, a refused request is given back, tokens are
// reserved from the prompt estimate (policies.BytesPerToken) and settled
// from the usage, and the budget refills with the clock.
func TestBudgetsOnTheInjectedClock(t *testing.T) {
	clk := clockwork.NewFakeClock()
	h := provisionedTenants(t, &LLMRoute{Tenants: map[string]*Tenant{
		"bt-r": {Keys: []string{"sk-bt-r"}, RequestsPerMinute: 3},
		"bt-t": {Keys: []string{"sk-bt-t"}, TokensPerMinute: 1000},
	}}, clk)
	ts := h.tenants[1]
	require.Equal(t, "bt-r", ts.name)
	// Requests: 3, the fourth waits 20 s; one given back lets another in.
	var held []*ticket
	for range 3 {
		tk, why, _ := ts.reserve(0, false)
		require.NotNil(t, tk, why)
		held = append(held, tk)
	}
	tk, why, wait := ts.reserve(0, false)
	assert.Nil(t, tk)
	assert.Equal(t, reasonRPM, why)
	assert.Equal(t, 20*time.Second, wait)
	ts.settle(held[0], false, 0, false) // refused by the queue: given back
	tk, _, _ = ts.reserve(0, false)
	require.NotNil(t, tk)
	ts.settle(tk, true, 0, false)
	ts.settle(held[1], true, 0, false)
	ts.settle(held[2], true, 0, false)
	assert.Equal(t, 0, ts.status().Reservations)
	clk.Advance(20 * time.Second)

	// Tokens: 800 prompt bytes are 200 tokens; the engine says 260.
	ts = h.tenants[2]
	tk, why, _ = ts.reserve(800, true)
	require.NotNil(t, tk, why)
	assert.Equal(t, 200.0, tk.tokens)
	assert.InDelta(t, 200, ts.status().ReservedTokens, 1e-9)
	ts.settle(tk, true, 260, true)
	assert.InDelta(t, 740, ts.status().TokensLeft, 1e-6)
	assert.Equal(t, 60.0, ts.status().EstimatedExcess, "the output is learned")
	tk, _, _ = ts.reserve(800, true)
	require.NotNil(t, tk)
	assert.Equal(t, 260.0, tk.tokens, "the next estimate covers the output")
	ts.settle(tk, true, 260, true)
	// 480 left: an estimate of 260 fits once more, then not.
	tk, _, _ = ts.reserve(800, true)
	require.NotNil(t, tk)
	ts.settle(tk, true, 260, true)
	tk, why, wait = ts.reserve(800, true)
	assert.Nil(t, tk)
	assert.Equal(t, reasonTPM, why)
	assert.Equal(t, time.Duration(float64(260-220)/1000*float64(time.Minute)), wait)
	clk.Advance(wait)
	tk, _, _ = ts.reserve(800, true)
	require.NotNil(t, tk, "refilled")
	ts.settle(tk, false, 0, false)
	assert.InDelta(t, 3*260.0, ts.status().TokensCharged, 1e-9)
}

// TestTenantCaddyfile covers the tenant block and sheddable_share.
func TestTenantCaddyfile(t *testing.T) {
	var h LLMRoute
	d := caddyfile.NewTestDispenser(`llm_route {
		api_keys sk-default
		tenant alice {
			keys {env.ALICE_KEY} sk-alice-2
			weight 2.5
			priority critical
			max_in_flight 16
			requests_per_minute 600
			tokens_per_minute 200000
		}
		tenant batch {
			key sk-batch
			priority sheddable
		}
	}`)
	require.NoError(t, h.UnmarshalCaddyfile(d))
	b, err := json.Marshal(h)
	require.NoError(t, err)
	assert.JSONEq(t, `{"api_keys":["sk-default"],"tenants":{
		"alice":{"keys":["{env.ALICE_KEY}","sk-alice-2"],"weight":2.5,"priority":"critical","max_in_flight":16,"requests_per_minute":600,"tokens_per_minute":200000},
		"batch":{"keys":["sk-batch"],"priority":"sheddable"}}}`, string(b))

	for _, bad := range []string{
		"tenant",
		"tenant a b {\nkeys k\n}",
		"tenant a {\nkeys k\n}\ntenant a {\nkeys j\n}",
		"tenant a {\nkeys k\ncolour red\n}",
		"tenant a {\nweight heavy\n}",
		"tenant a {\nmax_in_flight 2 3\n}",
		"tenant a {\nkeys\n}",
	} {
		var h LLMRoute
		assert.Error(t, h.UnmarshalCaddyfile(caddyfile.NewTestDispenser("llm_route {\n"+bad+"\n}")), bad)
	}

	var p LLMSelection
	require.NoError(t, p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`llm {
		sheddable_share 0.6
	}`)))
	assert.Equal(t, 0.6, p.SheddableShare)
	p.SheddableShare = 1.5
	assert.ErrorContains(t, p.Validate(), "sheddable_share")
}
