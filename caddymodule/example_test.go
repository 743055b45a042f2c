package caddymodule

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/stretchr/testify/require"
)

// TestCaddyfileExampleIsValid adapts and provisions Caddyfile.example (what
// ./xcaddy.sh demo runs and the README points to), so that an option
// renamed or removed breaks a test rather than the demo.
func TestCaddyfileExampleIsValid(t *testing.T) {
	b, err := os.ReadFile("../Caddyfile.example")
	require.NoError(t, err)
	t.Setenv("LLMROUTE_API_KEY", "sk-example-test")
	cfgJSON, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt(b, nil)
	require.NoError(t, err, "adapt: %v", warn)
	var cfg caddy.Config
	require.NoError(t, json.Unmarshal(cfgJSON, &cfg))
	require.NoError(t, caddy.Validate(&cfg))
	// The policy options the example shows reach the module.
	require.Contains(t, string(cfgJSON), `"cooldown_base":1000000000`)
	require.Contains(t, string(cfgJSON), `"dial_timeout_fails":3`)
	require.Contains(t, string(cfgJSON), `"status_fails":3`)
	require.Contains(t, string(cfgJSON), `"allow_paths":["/health"]`)
	require.Contains(t, string(cfgJSON), `"priority":"sheddable"`)
	require.Contains(t, string(cfgJSON), `"sheddable_share":0.8`)
	// Slow clients are bounded; streams are not cut by a write timeout.
	require.Contains(t, string(cfgJSON), `"read_header_timeout":10000000000`)
	require.Contains(t, string(cfgJSON), `"read_timeout":60000000000`)
	require.Contains(t, string(cfgJSON), `"idle_timeout":120000000000`)
	require.NotContains(t, string(cfgJSON), `"write_timeout"`)
	// Query-string keys are kept out of the access log.
	require.Contains(t, string(cfgJSON), `"filter":"query"`)
	require.Contains(t, string(cfgJSON), `"parameter":"api_key"`)
}
