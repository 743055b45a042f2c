package caddymodule

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
)

// fields splits a table row into its cells (two spaces or more apart).
func fields(row string) []string {
	var out []string
	for _, c := range strings.Split(row, "  ") {
		if c = strings.TrimSpace(c); c != "" {
			out = append(out, c)
		}
	}
	return out
}

// TestRenderStatus proves the table of `caddy llm status` from a fixture
// state: each pool with its replicas under it (in flight against the
// pool's cap, cooldown time left and reason, the probe, engine queue and
// KV usage or "stale", precision with its checks, sessions), a replica
// of no live pool apart, the totals and the tenants' budgets.
func TestRenderStatus(t *testing.T) {
	b, err := os.ReadFile("testdata/state.json")
	require.NoError(t, err)
	var st stateapi.State
	require.NoError(t, json.Unmarshal(b, &st))
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var out bytes.Buffer
	require.NoError(t, renderStatus(&out, st, now))
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	rows := map[string][]string{}
	order := []string{}
	for _, l := range lines {
		if f := fields(l); len(f) > 0 {
			rows[f[0]] = f
			order = append(order, f[0])
		}
	}
	assert.Equal(t, []string{"POOL 1", "prefix_load", "max_in_flight 8", "queued 3/256"}, rows["POOL 1"])
	assert.Equal(t, []string{"127.0.0.1:9001", "7/8", "-", "2/5", "41%", "0.95 (20 checks)", "12"}, rows["127.0.0.1:9001"])
	assert.Equal(t, []string{"127.0.0.1:9002", "0/8", "cooling 2.5s (429), needs probe", "stale", "-", "-", "0"}, rows["127.0.0.1:9002"])
	assert.Equal(t, []string{"POOL 2", "least_load", "max_in_flight 4", "queued 0/16"}, rows["POOL 2"])
	assert.Equal(t, []string{"127.0.0.1:9101", "1/4", "-", "-", "-", "0.25 (4 checks)", "0"}, rows["127.0.0.1:9101"])
	assert.Equal(t, []string{"127.0.0.1:9999", "1", "draining", "-", "-", "-", "0"}, rows["127.0.0.1:9999"], "no pool: no cap")
	assert.Equal(t, []string{"alice", "4/10", "1", "critical", "512/600", "150000/200000", "48211"}, rows["alice"])
	assert.Equal(t, []string{"default", "0", "0", "standard", "-", "-", "0"}, rows["default"])
	assert.Equal(t, []string{"in flight 9, queued 3"}, rows["in flight 9, queued 3"])
	// Each replica under its own pool, the orphan after every pool.
	idx := func(k string) int {
		for i, o := range order {
			if o == k {
				return i
			}
		}
		return -1
	}
	assert.Less(t, idx("POOL 1"), idx("127.0.0.1:9001"))
	assert.Less(t, idx("127.0.0.1:9002"), idx("POOL 2"))
	assert.Less(t, idx("POOL 2"), idx("127.0.0.1:9101"))
	assert.Less(t, idx("REPLICAS OF NO LIVE POOL"), idx("127.0.0.1:9999"))
	assert.Less(t, idx("127.0.0.1:9101"), idx("REPLICAS OF NO LIVE POOL"))
}

// TestPrintStateJSON proves --json: the admin API's body, indented, or one
// line of it under --watch; a body that is not JSON is an error.
func TestPrintStateJSON(t *testing.T) {
	b, err := os.ReadFile("testdata/state.json")
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, printState(&out, b, true, true, time.Now()))
	var st stateapi.State
	require.NoError(t, json.Unmarshal(out.Bytes(), &st))
	assert.Len(t, st.Replicas, 4)
	assert.Contains(t, out.String(), "\n  \"policies\"")
	out.Reset()
	require.NoError(t, printState(&out, b, false, true, time.Now()))
	assert.Equal(t, 1, strings.Count(out.String(), "\n"), "one line per state")
	assert.Error(t, printState(&out, []byte("<html>"), false, true, time.Now()))
	assert.Error(t, printState(&out, []byte("<html>"), false, false, time.Now()))
}
