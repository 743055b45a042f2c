package caddymodule

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

// The Caddyfile side of every module, apart from their behaviour.

func init() {
	httpcaddyfile.RegisterHandlerDirective("llm_route", parseLLMRoute)
	// llm_route must see the request before reverse_proxy picks a replica,
	// so it works without a route block.
	httpcaddyfile.RegisterDirectiveOrder("llm_route", httpcaddyfile.Before, "reverse_proxy")
}

// parseLLMRoute builds the handler from its Caddyfile directive.
func parseLLMRoute(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(LLMRoute)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	llm_route {
//		api_keys         <key...>
//		upstream_api_key <key>
//		deployment       <identity>
//		max_body_bytes   <size>
//		block_size       <bytes>
//		max_blocks       <n>
//		replica_header   <name>
//		request_usage
//		allow_paths      <path...>
//		session_headers  <header...>
//		tenant <name> {
//			keys                <key...>
//			weight              <float>
//			priority            critical|standard|sheddable
//			max_in_flight       <n>
//			requests_per_minute <n>
//			tokens_per_minute   <n>
//		}
//	}
func (h *LLMRoute) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "api_keys", "api_key":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			h.APIKeys = append(h.APIKeys, args...)
		case "upstream_api_key":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.UpstreamAPIKey = d.Val()
		case "deployment":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.Deployment = d.Val()
		case "max_body_bytes", "max_body_size":
			if !d.NextArg() {
				return d.ArgErr()
			}
			size, err := humanizeSize(d.Val())
			if err != nil {
				return d.Errf("max_body_bytes: %v", err)
			}
			h.MaxBodyBytes = size
		case "block_size", "max_blocks":
			name := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			if name == "block_size" {
				h.BlockSize = n
			} else {
				h.MaxBlocks = n
			}
		case "replica_header":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.ReplicaHeader = d.Val()
		case "request_usage":
			h.RequestUsage = true
		case "allow_paths":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			h.AllowPaths = append(h.AllowPaths, args...)
		case "session_headers":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			h.SessionHeaders = append(h.SessionHeaders, args...)
		case "tenant":
			name, t, err := parseTenant(d)
			if err != nil {
				return err
			}
			if _, dup := h.Tenants[name]; dup {
				return d.Errf("tenant %q defined twice", name)
			}
			if h.Tenants == nil {
				h.Tenants = map[string]*Tenant{}
			}
			h.Tenants[name] = t
		default:
			return d.Errf("unrecognized llm_route option %q", d.Val())
		}
	}
	return nil
}

// UnmarshalCaddyfile sets up the policy from Caddyfile tokens:
//
//	lb_policy llm [<strategy>] {
//		strategy        round_robin|prefix_affinity|least_load|prefix_load
//		max_in_flight   <n>
//		queue_size      <n>
//		queue_timeout   <duration>
//		sheddable_share <fraction>
//		slow_start      <duration>
//		cooldown        <base> [<max>]
//		dial_timeout_fails <n> [<window>]
//		fail_status     <code...>
//		status_fails    <n>
//		balance_factor  <float>
//		load_slack      <n>
//		cold_choices    1|2|3
//		peers           auto|none|some
//		cold_slack      <fraction>
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
		switch d.Val() {
		case "strategy":
			if !d.NextArg() {
				return d.ArgErr()
			}
			p.Strategy = d.Val()
		case "max_in_flight", "queue_size", "load_slack", "index_blocks", "cold_choices", "status_fails":
			name := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			switch name {
			case "max_in_flight":
				p.MaxInFlight = n
			case "queue_size":
				p.QueueSize = n
			case "load_slack":
				p.LoadSlack = n
			case "index_blocks":
				p.IndexBlocks = n
			case "cold_choices":
				p.ColdChoices = n
			case "status_fails":
				p.StatusFails = n
			}
		case "sheddable_share":
			if !d.NextArg() {
				return d.ArgErr()
			}
			f, err := strconv.ParseFloat(d.Val(), 64)
			if err != nil {
				return d.Errf("sheddable_share: %v", err)
			}
			p.SheddableShare = f
		case "queue_timeout", "slow_start":
			name := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			if name == "slow_start" {
				p.SlowStart = caddy.Duration(dur)
			} else {
				p.QueueTimeout = caddy.Duration(dur)
			}
		case "cooldown":
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
		case "dial_timeout_fails":
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
		case "fail_status":
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
		case "balance_factor", "cold_balance_factor":
			opt := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			f, err := strconv.ParseFloat(d.Val(), 64)
			if err != nil {
				return d.Errf("%s: %v", opt, err)
			}
			if opt == "balance_factor" {
				p.BalanceFactor = f
			} else {
				p.ColdBalanceFactor = f
			}
		case "peers":
			if !d.NextArg() {
				return d.ArgErr()
			}
			p.Peers = d.Val()
		case "cold_slack":
			if !d.NextArg() {
				return d.ArgErr()
			}
			f, err := strconv.ParseFloat(d.Val(), 64)
			if err != nil {
				return d.Errf("cold_slack: %v", err)
			}
			p.ColdSlack = f
		case "homes_directory":
			cfg, err := parseHomesDirectory(d)
			if err != nil {
				return err
			}
			p.HomesDirectory = cfg
		case "index_answers":
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
		case "seed":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.ParseUint(d.Val(), 10, 64)
			if err != nil {
				return d.Errf("seed: %v", err)
			}
			p.Seed = n
		case "engine_metrics":
			cfg, err := parseEngineMetrics(d)
			if err != nil {
				return err
			}
			p.EngineMetrics = cfg
		default:
			return d.Errf("unrecognized llm policy option %q", d.Val())
		}
	}
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
		if !d.NextArg() {
			return nil, d.ArgErr()
		}
		if key == "scheme" {
			cfg.Scheme = d.Val()
			continue
		}
		dur, err := caddy.ParseDuration(d.Val())
		if err != nil {
			return nil, d.Errf("engine_metrics %s: %v", key, err)
		}
		switch key {
		case "interval":
			cfg.Interval = caddy.Duration(dur)
		case "timeout":
			cfg.Timeout = caddy.Duration(dur)
		case "stale_after":
			cfg.StaleAfter = caddy.Duration(dur)
		default:
			return nil, d.Errf("unrecognized engine_metrics option %q", key)
		}
	}
	return cfg, nil
}

// UnmarshalCaddyfile sets up the matcher from Caddyfile tokens:
//
//	@name llm_model <pattern...>
func (m *MatchLLMModel) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	for d.Next() { // several llm_model lines in one matcher set merge
		args := d.RemainingArgs()
		if len(args) == 0 {
			return d.ArgErr()
		}
		*m = append(*m, args...)
	}
	return nil
}

// parseTenant reads `tenant <name> { ... }` (see LLMRoute's
// UnmarshalCaddyfile).
func parseTenant(d *caddyfile.Dispenser) (string, *Tenant, error) {
	if !d.NextArg() {
		return "", nil, d.ArgErr()
	}
	name := d.Val()
	if d.NextArg() {
		return "", nil, d.ArgErr()
	}
	t := &Tenant{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		switch opt {
		case "keys", "key":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return "", nil, d.ArgErr()
			}
			t.Keys = append(t.Keys, args...)
		case "priority":
			if !d.NextArg() {
				return "", nil, d.ArgErr()
			}
			t.Priority = d.Val()
		case "weight":
			if !d.NextArg() {
				return "", nil, d.ArgErr()
			}
			f, err := strconv.ParseFloat(d.Val(), 64)
			if err != nil {
				return "", nil, d.Errf("tenant %s weight: %v", name, err)
			}
			t.Weight = f
		case "max_in_flight", "requests_per_minute", "tokens_per_minute":
			if !d.NextArg() {
				return "", nil, d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil {
				return "", nil, d.Errf("tenant %s %s: %v", name, opt, err)
			}
			switch opt {
			case "max_in_flight":
				t.MaxInFlight = n
			case "requests_per_minute":
				t.RequestsPerMinute = n
			default:
				t.TokensPerMinute = n
			}
		default:
			return "", nil, d.Errf("unrecognized tenant option %q", opt)
		}
		if d.NextArg() {
			return "", nil, d.ArgErr()
		}
	}
	return name, t, nil
}

// humanizeSize parses sizes like "8MiB" or "512KB" into bytes.
func humanizeSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	return int64(n), err
}
