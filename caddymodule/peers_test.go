package caddymodule

import (
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestPrefixLoadOptions parses and sets up prefix_load's cold-placement
// options: each lands in the strategy's options, and bad values are
// refused with the option's name.
func TestPrefixLoadOptions(t *testing.T) {
	var p LLMSelection
	require.NoError(t, p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`llm {
		peers some
		cold_slack 1.5
		detour_slack 0.75
		unique_run 16
		index_answers off
	}`)))
	assert.Equal(t, "some", p.Peers)
	assert.Equal(t, 1.5, p.ColdSlack)
	assert.Equal(t, 0.75, p.DetourSlack)
	require.NotNil(t, p.IndexAnswers)
	assert.False(t, *p.IndexAnswers)
	require.NoError(t, p.setup())
	require.NoError(t, p.Validate())
	assert.Equal(t, policies.PeersSome, p.opts.Peers)
	assert.Equal(t, 1.5, p.opts.ColdSlack)
	assert.Equal(t, 0.75, p.opts.DetourSlack)
	assert.Equal(t, 16, p.opts.UniqueRun)
	assert.False(t, p.rules.indexAnswers)

	var d LLMSelection
	require.NoError(t, d.setup())
	assert.Equal(t, policies.PeersAuto, d.opts.Peers, "default: inferred")
	assert.Equal(t, policies.DefaultColdSlack, d.opts.ColdSlack)
	assert.Equal(t, policies.DefaultDetourSlack, d.opts.DetourSlack)
	assert.Equal(t, policies.DefaultUniqueRun, d.opts.UniqueRun)
	assert.Zero(t, d.opts.ColdChoices, "default: the adaptive cold rule")
	assert.True(t, d.rules.indexAnswers, "default: answers are indexed")

	var off LLMSelection
	require.NoError(t, off.UnmarshalCaddyfile(caddyfile.NewTestDispenser("llm {\n cold_slack -1\n index_answers\n}")))
	assert.Equal(t, -1.0, off.ColdSlack)
	require.NotNil(t, off.IndexAnswers)
	assert.True(t, *off.IndexAnswers)
	require.NoError(t, off.setup())
	assert.Zero(t, off.opts.ColdSlack, "no slack")

	for _, tt := range []struct{ in, want string }{
		{"llm {\n peers\n}", "wrong argument count"},
		{"llm {\n cold_slack lots\n}", "cold_slack"},
		{"llm {\n detour_slack\n}", "detour_slack"},
		{"llm {\n unique_run many\n}", "unique_run"},
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
}

// TestStateShowsNewPrefixPlacement proves /llm_route/state tells where
// prefix_load sends new prefixes: to their rendezvous home with peers,
// by load once unique_run requests in a row found nothing seen before,
// by load alone; nothing for a strategy without homes.
func TestStateShowsNewPrefixPlacement(t *testing.T) {
	p := LLMSelection{Peers: "some", UniqueRun: 3}
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
