package caddymodule

import (
	"fmt"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestSelectionCaddyfile parses lb_policy llm blocks: every option lands
// in its field, and bad input is an error that names the option.
func TestSelectionCaddyfile(t *testing.T) {
	good := []struct {
		name, in string
		check    func(t *testing.T, p *LLMSelection)
	}{
		{"strategy as argument", `llm least_load`, func(t *testing.T, p *LLMSelection) {
			assert.Equal(t, "least_load", p.Strategy)
		}},
		{"every option", `llm {
			strategy prefix_load
			max_in_flight 8
			queue_size 32
			queue_timeout 3s
			slow_start 10s
			slot_hold 2s
			cooldown 2s 20s {
				dial_timeout_fails 5 30s
				fail_status 500 502
				status_fails 4
			}
			balance_factor 1.25
			index_blocks 4096
		}`, func(t *testing.T, p *LLMSelection) {
			assert.Equal(t, "prefix_load", p.Strategy)
			assert.Equal(t, 8, p.MaxInFlight)
			assert.Equal(t, 32, p.QueueSize)
			assert.Equal(t, caddy.Duration(3*time.Second), p.QueueTimeout)
			assert.Equal(t, caddy.Duration(10*time.Second), p.SlowStart)
			assert.Equal(t, caddy.Duration(2*time.Second), p.SlotHold)
			assert.Equal(t, caddy.Duration(2*time.Second), p.CooldownBase)
			assert.Equal(t, caddy.Duration(20*time.Second), p.CooldownMax)
			assert.Equal(t, 5, p.DialTimeoutFails)
			assert.Equal(t, caddy.Duration(30*time.Second), p.DialTimeoutWindow)
			assert.Equal(t, []int{500, 502}, p.FailStatus)
			assert.Equal(t, 4, p.StatusFails)
			assert.Equal(t, 1.25, p.BalanceFactor)
			assert.Equal(t, 4096, p.IndexBlocks)
		}},
		{"cooldown block alone keeps the defaults of its arguments", "llm {\n cooldown {\n status_fails 1\n }\n}", func(t *testing.T, p *LLMSelection) {
			assert.Zero(t, p.CooldownBase)
			assert.Equal(t, 1, p.StatusFails)
		}},
	}
	for _, tt := range good {
		t.Run(tt.name, func(t *testing.T) {
			var p LLMSelection
			require.NoError(t, p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.in)))
			tt.check(t, &p)
		})
	}
	bad := []struct{ in, want string }{
		{`llm prefix_load extra`, "wrong argument count"},
		{"llm {\n balance_factor\n}", "wrong argument count"},
		{"llm {\n balance_factor x\n}", "balance_factor"},
		{"llm {\n max_in_flight many\n}", "max_in_flight"},
		{"llm {\n cooldown 1s {\n fail_status 99\n }\n}", "fail_status"},
		{"llm {\n cooldown soon\n}", "cooldown"},
		{"llm {\n cooldown\n}", "wrong argument count"},
		{"llm {\n cooldown 1s 2s 3s\n}", "wrong argument count"},
		{"llm {\n cooldown 1s {\n dial_timeout_fails\n }\n}", "wrong argument count"},
		{"llm {\n cooldown 1s {\n dial_timeout_fails some\n }\n}", "dial_timeout_fails"},
		{"llm {\n cooldown 1s {\n dial_timeout_fails 3 later\n }\n}", "dial_timeout_fails"},
		{"llm {\n cooldown 1s {\n probe_every 3\n }\n}", "unrecognized cooldown option"},
		// Removed directives say what replaced them.
		{"llm {\n cold_choices 1\n}", "one rule for new prefixes"},
		{"llm {\n detour_slack 0.5\n}", `"tuning" object`},
		{"llm {\n cold_slack 1\n}", `"tuning" object`},
		{"llm {\n load_slack 1\n}", `"tuning" object`},
		{"llm {\n unique_run 1\n}", `"tuning" object`},
		{"llm {\n cold_balance_factor 2\n}", `"tuning" object`},
		{"llm {\n seed 7\n}", `"tuning" object`},
		{"llm {\n fail_status 500\n}", "subdirective of cooldown"},
		{"llm {\n status_fails 2\n}", "subdirective of cooldown"},
		{"llm {\n dial_timeout_fails 2\n}", "subdirective of cooldown"},
		{"llm {\n colour blue\n}", "unrecognized"},
		{"llm {\n slot_hold a_while\n}", "slot_hold"},
	}
	for _, tt := range bad {
		var p LLMSelection
		err := p.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tt.in))
		if assert.Error(t, err, tt.in) {
			assert.Contains(t, err.Error(), tt.want, tt.in)
		}
	}
}

// TestSelectionValidateColdBalanceFactor: a cold bound below 1 in the
// tuning object is refused; unset keeps the default.
func TestSelectionValidateColdBalanceFactor(t *testing.T) {
	for _, tt := range []struct {
		f  float64
		ok bool
	}{{0, true}, {1, true}, {2.5, true}, {0.5, false}, {-1, false}} {
		p := LLMSelection{Tuning: &Tuning{ColdBalanceFactor: tt.f}, BalanceFactor: 1.5}
		err := p.Validate()
		if tt.ok {
			assert.NoError(t, err, "%v", tt.f)
		} else {
			assert.ErrorContains(t, err, "cold_balance_factor", "%v", tt.f)
		}
	}
}

// TestSelectionValidateSlotHold: a negative slot_hold is refused; 0 (off)
// and a duration are taken.
func TestSelectionValidateSlotHold(t *testing.T) {
	for _, tt := range []struct {
		d  time.Duration
		ok bool
	}{{0, true}, {2 * time.Second, true}, {-time.Second, false}} {
		p := LLMSelection{SlotHold: caddy.Duration(tt.d), BalanceFactor: 1.5}
		err := p.Validate()
		if tt.ok {
			assert.NoError(t, err, "%v", tt.d)
		} else {
			assert.ErrorContains(t, err, "slot_hold", "%v", tt.d)
		}
	}
}

// TestStateShowsEffectivePolicy proves that /llm_route/state lists the live
// policy with what it was configured with and the defaults it filled in.
func TestStateShowsEffectivePolicy(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s {
		lb_policy llm {
			max_in_flight 7
		}
	}`, f.addr))
	pol := r.state().Policies
	require.Len(t, pol, 1)
	p := pol[0]
	assert.Equal(t, "prefix_load", p.Strategy)
	assert.Equal(t, 7, p.MaxInFlight)
	assert.Equal(t, policies.DefaultColdBalanceFactor, p.ColdBalanceFactor)
	assert.Equal(t, 256, p.QueueSize)
	assert.Equal(t, 30*time.Second, p.QueueTimeout)
	assert.Equal(t, 1.5, p.BalanceFactor)
	assert.Equal(t, 3, p.DialTimeoutFails)
	assert.False(t, p.EngineMetrics)
}
