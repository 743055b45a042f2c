package caddymodule

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// The Caddyfile side of `lb_policy llm`, apart from its behaviour.

// UnmarshalCaddyfile sets up the policy from Caddyfile tokens:
//
//	lb_policy llm [<strategy>] {
//		strategy        round_robin|prefix_affinity|least_load|prefix_load
//		max_in_flight   <n>
//		queue_size      <n>
//		queue_timeout   <duration>
//		sheddable_share <fraction>
//		slow_start      <duration>
//		slot_hold       <duration>
//		cooldown        <base> [<max>] {
//			dial_timeout_fails <n> [<window>]
//			fail_status        <code...>
//			status_fails       <n>
//		}
//		balance_factor  <float>
//		peers           auto|none|some
//		index_answers   [on|off]
//		index_blocks    <n>
//		homes_directory redis://host:port[/db]|shared_store {
//			key_prefix <prefix>
//			ttl        <duration>
//			timeout    <duration>
//		}
//		engine_metrics  [<path>] {
//			interval <duration>
//			timeout  <duration>
//			stale_after <duration>
//			api_key  <key>
//		}
//		cache_report    auto|always|never
//	}
func (p *LLMSelection) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume policy name
	if d.NextArg() {
		p.Strategy = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		opt := d.Val()
		var err error
		switch opt {
		case "strategy":
			p.Strategy, err = oneArg(d)
		case "peers":
			p.Peers, err = oneArg(d)
		case "max_in_flight":
			err = intArg(d, opt, &p.MaxInFlight)
		case "queue_size":
			err = intArg(d, opt, &p.QueueSize)
		case "index_blocks":
			err = intArg(d, opt, &p.IndexBlocks)
		case "queue_timeout":
			err = durationArg(d, opt, &p.QueueTimeout)
		case "slow_start":
			err = durationArg(d, opt, &p.SlowStart)
		case "slot_hold":
			err = durationArg(d, opt, &p.SlotHold)
		case "sheddable_share":
			err = floatArg(d, opt, &p.SheddableShare)
		case "balance_factor":
			err = floatArg(d, opt, &p.BalanceFactor)
		case "cooldown":
			err = p.parseCooldown(d)
		case "index_answers":
			err = p.parseIndexAnswers(d)
		case "homes_directory":
			p.HomesDirectory, err = parseHomesDirectory(d)
		case "engine_metrics":
			p.EngineMetrics, err = parseEngineMetrics(d)
		case "cache_report":
			p.CacheReport, err = oneArg(d)
		default:
			if why, ok := removedPolicyOptions[opt]; ok {
				return d.Errf("llm policy option %q was removed: %s", opt, why)
			}
			return d.Errf("unrecognized llm policy option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// removedPolicyOptions says what replaced each directive a Caddyfile may
// still name.
var removedPolicyOptions = map[string]string{
	"cold_choices":        "prefix_load has one rule for new prefixes (README, \"prefix_load\")",
	"load_slack":          tuningMoved,
	"cold_balance_factor": tuningMoved,
	"cold_slack":          tuningMoved,
	"detour_slack":        tuningMoved,
	"unique_run":          tuningMoved,
	"seed":                tuningMoved,
	"dial_timeout_fails":  "it is a subdirective of cooldown: cooldown <base> [<max>] { dial_timeout_fails <n> [<window>] }",
	"fail_status":         "it is a subdirective of cooldown: cooldown <base> [<max>] { fail_status <code...> }",
	"status_fails":        "it is a subdirective of cooldown: cooldown <base> [<max>] { status_fails <n> }",
}

const tuningMoved = "its default is measured and kept; experiments set it in the JSON config's \"tuning\" object"

// parseCooldown reads
//
//	cooldown <base> [<max>] {
//		dial_timeout_fails <n> [<window>]
//		fail_status        <code...>
//		status_fails       <n>
//	}
func (p *LLMSelection) parseCooldown(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) > 2 {
		return d.ArgErr()
	}
	for i, a := range args {
		v, err := caddy.ParseDuration(a)
		if err != nil {
			return d.Errf("cooldown: %v", err)
		}
		if i == 0 {
			p.CooldownBase = caddy.Duration(v)
		} else {
			p.CooldownMax = caddy.Duration(v)
		}
	}
	blocks := 0
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		blocks++
		var err error
		switch opt := d.Val(); opt {
		case "dial_timeout_fails":
			err = p.parseDialTimeoutFails(d)
		case "fail_status":
			err = p.parseFailStatus(d)
		case "status_fails":
			err = intArg(d, opt, &p.StatusFails)
		default:
			err = d.Errf("unrecognized cooldown option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	if len(args) == 0 && blocks == 0 {
		return d.ArgErr()
	}
	return nil
}

// parseDialTimeoutFails reads `dial_timeout_fails <n> [<window>]`.
func (p *LLMSelection) parseDialTimeoutFails(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.ArgErr()
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		return d.Errf("dial_timeout_fails: %v", err)
	}
	p.DialTimeoutFails = n
	if len(args) == 2 {
		w, err := caddy.ParseDuration(args[1])
		if err != nil {
			return d.Errf("dial_timeout_fails: %v", err)
		}
		p.DialTimeoutWindow = caddy.Duration(w)
	}
	return nil
}

// parseFailStatus reads `fail_status <code...>`.
func (p *LLMSelection) parseFailStatus(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.ArgErr()
	}
	p.FailStatus = p.FailStatus[:0]
	for _, a := range args {
		n, err := strconv.Atoi(a)
		if err != nil || n < 100 || n > 599 {
			return d.Errf("fail_status: bad status code %q", a)
		}
		p.FailStatus = append(p.FailStatus, n)
	}
	return nil
}

// parseIndexAnswers reads `index_answers [on|off]`.
func (p *LLMSelection) parseIndexAnswers(d *caddyfile.Dispenser) error {
	on := true
	if d.NextArg() {
		switch d.Val() {
		case "on":
		case "off":
			on = false
		default:
			return d.Errf("index_answers: want on or off, got %q", d.Val())
		}
	}
	p.IndexAnswers = &on
	return nil
}

// parseEngineMetrics reads `engine_metrics [<path>] { ... }`.
func parseEngineMetrics(d *caddyfile.Dispenser) (*EngineMetricsConfig, error) {
	cfg := &EngineMetricsConfig{}
	if d.NextArg() {
		cfg.Path = d.Val()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		var err error
		switch key {
		case "scheme":
			cfg.Scheme, err = oneArg(d)
		case "interval":
			err = durationArg(d, "engine_metrics "+key, &cfg.Interval)
		case "timeout":
			err = durationArg(d, "engine_metrics "+key, &cfg.Timeout)
		case "stale_after":
			err = durationArg(d, "engine_metrics "+key, &cfg.StaleAfter)
		case "api_key":
			cfg.APIKey, err = oneArg(d)
		default:
			return nil, d.Errf("unrecognized engine_metrics option %q", key)
		}
		if err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// parseHomesDirectory reads
//
//	homes_directory <url>|shared_store {
//		key_prefix <prefix>
//		ttl        <duration>
//		timeout    <duration>
//	}
//
// shared_store names llm_route's store, whose timeout applies.
func parseHomesDirectory(d *caddyfile.Dispenser) (*HomesDirectoryConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := &HomesDirectoryConfig{URL: d.Val()}
	if cfg.URL == "shared_store" {
		cfg.URL, cfg.SharedStore = "", true
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	if err := cfg.validate(); err != nil {
		return nil, d.Errf("homes_directory: %v", err)
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if !d.NextArg() {
			return nil, d.ArgErr()
		}
		switch opt {
		case "key_prefix":
			cfg.KeyPrefix = d.Val()
		case "ttl", "timeout":
			dur, err := positiveDuration(d, "homes_directory "+opt, d.Val())
			if err != nil {
				return nil, err
			}
			if opt == "ttl" {
				cfg.TTL = dur
			} else {
				cfg.Timeout = dur
			}
		default:
			return nil, d.Errf("unrecognized homes_directory option %q", opt)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, d.Errf("homes_directory: %v", err)
	}
	return cfg, nil
}
