package integration

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

// TestEnginePersonalities runs the caddy binary in front of simulated
// replicas answering as each engine does (simreplica's personalities):
// the router reads each engine's metrics under its own names (llama.cpp's
// behind its key), and checks its predictions on every one: vLLM and
// SGLang stay silent when nothing was cached, llama.cpp reports 0, and
// after a figure the silence counts as 0 cached.
func TestEnginePersonalities(t *testing.T) {
	for _, p := range []simreplica.Personality{simreplica.VLLM, simreplica.SGLang, simreplica.LlamaCpp} {
		t.Run(string(p), func(t *testing.T) {
			cfg := baseConfig()
			cfg.Strategy = "prefix_load"
			cfg.EngineMetrics = 100 * time.Millisecond
			key := ""
			if p == simreplica.LlamaCpp {
				key = "sk-engine"
				cfg.EngineMetricsKey = key
			}
			e, sims := newSimEnvWith(t, 1, cfg, func(sc *simreplica.Config) { sc.Personality, sc.APIKey = p, key })
			require.Len(t, sims, 1)
			addr := e.cfg.Upstreams[0]
			prompt := strings.Repeat("Summarise the house style guide, rule by rule. ", 30)
			for range 4 {
				res := e.do(newID(t), chatBody(false, false, prompt), nil)
				require.NoError(t, res.Err)
				require.Equal(t, http.StatusOK, res.Status, "body: %s", res.Body)
			}
			e.waitState(10*time.Second, "engine metrics read as "+string(p), func(s stateapi.State) bool {
				eng := e.replicaState(addr).Engine
				return eng != nil && eng.Engine == string(p) && eng.LastError == ""
			})
			e.waitState(10*time.Second, "the predictions checked", func(stateapi.State) bool {
				return e.replicaState(addr).Feedback.Checks >= 3
			})
			st := e.replicaState(addr)
			assert.Contains(t, st.ReportsCached, "chat", "a figure was reported")
			assert.Positive(t, st.Feedback.Hits, "the repeated system prompt is predicted and found cached")
		})
	}
}
