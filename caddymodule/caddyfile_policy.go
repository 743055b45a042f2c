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
//		cooldown        <base> [<max>]
//		dial_timeout_fails <n> [<window>]
//		fail_status     <code...>
//		status_fails    <n>
//		balance_factor  <float>
//		load_slack      <n>
//		cold_choices    1|2|3
//		peers           auto|none|some
//		cold_slack      <fraction>
//		detour_slack    <fraction>
//		index_answers   [on|off]
//		homes_directory redis://host:port[/db] {
//			key_prefix <prefix>
//			ttl        <duration>
//			timeout    <duration>
//		}
//		cold_balance_factor <float>
//		index_blocks    <n>
//		seed            <n>
//		engine_metrics  [<path>] {
//			interval <duration>
//			timeout  <duration>
//			stale_after <duration>
//		}
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
		case "load_slack":
			err = intArg(d, opt, &p.LoadSlack)
		case "index_blocks":
			err = intArg(d, opt, &p.IndexBlocks)
		case "cold_choices":
			err = intArg(d, opt, &p.ColdChoices)
		case "unique_run":
			err = intArg(d, opt, &p.UniqueRun)
		case "status_fails":
			err = intArg(d, opt, &p.StatusFails)
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
		case "cold_balance_factor":
			err = floatArg(d, opt, &p.ColdBalanceFactor)
		case "cold_slack":
			err = floatArg(d, opt, &p.ColdSlack)
		case "detour_slack":
			err = floatArg(d, opt, &p.DetourSlack)
		case "cooldown":
			err = p.parseCooldown(d)
		case "dial_timeout_fails":
			err = p.parseDialTimeoutFails(d)
		case "fail_status":
			err = p.parseFailStatus(d)
		case "index_answers":
			err = p.parseIndexAnswers(d)
		case "seed":
			var s string
			if s, err = oneArg(d); err == nil {
				if p.Seed, err = strconv.ParseUint(s, 10, 64); err != nil {
					err = d.Errf("seed: %v", err)
				}
			}
		case "homes_directory":
			p.HomesDirectory, err = parseHomesDirectory(d)
		case "engine_metrics":
			p.EngineMetrics, err = parseEngineMetrics(d)
		default:
			return d.Errf("unrecognized llm policy option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// parseCooldown reads `cooldown <base> [<max>]`.
func (p *LLMSelection) parseCooldown(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.ArgErr()
	}
	base, err := caddy.ParseDuration(args[0])
	if err != nil {
		return d.Errf("cooldown: %v", err)
	}
	p.CooldownBase = caddy.Duration(base)
	if len(args) == 2 {
		m, err := caddy.ParseDuration(args[1])
		if err != nil {
			return d.Errf("cooldown: %v", err)
		}
		p.CooldownMax = caddy.Duration(m)
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
//	homes_directory <url> {
//		key_prefix <prefix>
//		ttl        <duration>
//		timeout    <duration>
//	}
func parseHomesDirectory(d *caddyfile.Dispenser) (*HomesDirectoryConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := &HomesDirectoryConfig{URL: d.Val()}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	if _, err := newRedisHomes(*cfg, nil); err != nil {
		return nil, d.Err(err.Error())
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
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				return nil, d.Errf("homes_directory %s: want a positive duration, got %q", opt, d.Val())
			}
			if opt == "ttl" {
				cfg.TTL = caddy.Duration(dur)
			} else {
				cfg.Timeout = caddy.Duration(dur)
			}
		default:
			return nil, d.Errf("unrecognized homes_directory option %q", opt)
		}
	}
	return cfg, nil
}
