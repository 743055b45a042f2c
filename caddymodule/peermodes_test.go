package caddymodule

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestPrefixLoadOptions sets up prefix_load's options: peers and
// index_answers from the Caddyfile, the measured constants from the JSON
// tuning object, each landing in the strategy's options.
func TestPrefixLoadOptions(t *testing.T) {
	var p LLMSelection
	require.NoError(t, p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`llm {
		peers some
		index_answers off
	}`)))
	assert.Equal(t, "some", p.Peers)
	require.NotNil(t, p.IndexAnswers)
	assert.False(t, *p.IndexAnswers)
	require.NoError(t, json.Unmarshal([]byte(`{"cold_slack":1.5,"detour_slack":0.75,"unique_run":16,"load_slack":-1,"seed":9}`), &p.Tuning))
	require.NoError(t, p.setup())
	require.NoError(t, p.Validate())
	assert.Equal(t, policies.PeersSome, p.opts.Peers)
	assert.Equal(t, 1.5, p.opts.ColdSlack)
	assert.Equal(t, 0.75, p.opts.DetourSlack)
	assert.Equal(t, 16, p.opts.UniqueRun)
	assert.Zero(t, p.opts.LoadSlack, "-1: no slack")
	assert.Equal(t, uint64(9), p.opts.Seed)
	assert.False(t, p.rules.indexAnswers)

	var d LLMSelection
	require.NoError(t, d.setup())
	assert.Equal(t, policies.PeersAuto, d.opts.Peers, "default: inferred")
	assert.Equal(t, policies.DefaultColdSlack, d.opts.ColdSlack)
	assert.Equal(t, policies.DefaultDetourSlack, d.opts.DetourSlack)
	assert.Equal(t, policies.DefaultUniqueRun, d.opts.UniqueRun)
	assert.Equal(t, policies.DefaultLoadSlack, d.opts.LoadSlack)
	assert.True(t, d.rules.indexAnswers, "default: answers are indexed")

	for _, tt := range []struct{ in, want string }{
		{"llm {\n peers\n}", "wrong argument count"},
		{"llm {\n index_answers maybe\n}", "index_answers"},
	} {
		var p LLMSelection
		err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.in))
		if assert.Error(t, err, tt.in) {
			assert.Contains(t, err.Error(), tt.want, tt.in)
		}
	}
	bad := LLMSelection{Peers: "many", BalanceFactor: 1.5}
	assert.ErrorContains(t, bad.Validate(), "peers")
	nan := LLMSelection{Tuning: &Tuning{DetourSlack: math.Inf(1)}}
	assert.ErrorContains(t, nan.setup(), "detour slack")
}

// TestStateShowsNewPrefixPlacement proves /llm_route/state tells where
// prefix_load sends new prefixes: to their rendezvous home with peers,
// by load once unique_run requests in a row found nothing seen before,
// by load alone; nothing for a strategy without homes.
func TestStateShowsNewPrefixPlacement(t *testing.T) {
	p := LLMSelection{Peers: "some", Tuning: &Tuning{UniqueRun: 3}}
	require.NoError(t, p.setup())
	st := p.status()
	assert.Equal(t, "home", st.NewPrefixes)
	assert.Equal(t, 3, st.UniqueRun)
	rs := make([]policies.Replica, 4)
	for i := range rs {
		rs[i] = policies.Replica{Addr: "10.0.0." + strconv.Itoa(i+1) + ":8000", EngineWaiting: -1, EngineRunning: -1, KVUsage: -1, Index: policies.NewIndex(64)}
	}
	for k := range uint64(3) {
		p.strategy.Pick(policies.Keys{Leading: 1000 + k, Blocks: []uint64{2000 + k}, LeadingBlocks: 1}, rs)
	}
	assert.Equal(t, "load", p.status().NewPrefixes, "three new prefixes in a row: by load")

	alone := LLMSelection{Peers: "none"}
	require.NoError(t, alone.setup())
	assert.Equal(t, "load", alone.status().NewPrefixes)
	assert.Equal(t, policies.DefaultUniqueRun, alone.status().UniqueRun)
	rr := LLMSelection{Strategy: "round_robin"}
	require.NoError(t, rr.setup())
	assert.Empty(t, rr.status().NewPrefixes)
}
