package caddymodule

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

// The Caddyfile side of llm_route and the llm_model matcher, apart from
// their behaviour (lb_policy llm's is in caddyfile_policy.go), and the
// argument helpers both use.

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
		opt := d.Val()
		var err error
		switch opt {
		case "api_keys", "api_key":
			err = argsList(d, &h.APIKeys)
		case "upstream_api_key":
			h.UpstreamAPIKey, err = oneArg(d)
		case "deployment":
			h.Deployment, err = oneArg(d)
		case "max_body_bytes", "max_body_size":
			var v string
			if v, err = oneArg(d); err == nil {
				if h.MaxBodyBytes, err = humanizeSize(v); err != nil {
					err = d.Errf("max_body_bytes: %v", err)
				}
			}
		case "block_size":
			err = intArg(d, opt, &h.BlockSize)
		case "max_blocks":
			err = intArg(d, opt, &h.MaxBlocks)
		case "replica_header":
			h.ReplicaHeader, err = oneArg(d)
		case "request_usage":
			h.RequestUsage = true
		case "allow_paths":
			err = argsList(d, &h.AllowPaths)
		case "session_headers":
			err = argsList(d, &h.SessionHeaders)
		case "shared_store":
			h.SharedStore, err = parseSharedStore(d)
		case "tenant":
			var name string
			var t *Tenant
			if name, t, err = parseTenant(d); err != nil {
				break
			}
			if _, dup := h.Tenants[name]; dup {
				return d.Errf("tenant %q defined twice", name)
			}
			if h.Tenants == nil {
				h.Tenants = map[string]*Tenant{}
			}
			h.Tenants[name] = t
		default:
			return d.Errf("unrecognized llm_route option %q", opt)
		}
		if err != nil {
			return err
		}
	}
	return nil
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
		var err error
		switch opt {
		case "keys", "key":
			err = argsList(d, &t.Keys)
		case "priority":
			t.Priority, err = oneArg(d)
		case "weight":
			err = floatArg(d, "tenant "+name+" weight", &t.Weight)
		case "max_in_flight":
			err = intArg(d, "tenant "+name+" "+opt, &t.MaxInFlight)
		case "requests_per_minute":
			err = intArg(d, "tenant "+name+" "+opt, &t.RequestsPerMinute)
		case "tokens_per_minute":
			err = intArg(d, "tenant "+name+" "+opt, &t.TokensPerMinute)
		default:
			return "", nil, d.Errf("unrecognized tenant option %q", opt)
		}
		if err != nil {
			return "", nil, err
		}
		if d.NextArg() {
			return "", nil, d.ArgErr()
		}
	}
	return name, t, nil
}

// oneArg reads the one argument of the option at d.
func oneArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	return d.Val(), nil
}

// argsList appends the option's arguments (at least one) to dst.
func argsList(d *caddyfile.Dispenser, dst *[]string) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.ArgErr()
	}
	*dst = append(*dst, args...)
	return nil
}

// intArg reads the option's one integer argument into dst.
func intArg(d *caddyfile.Dispenser, opt string, dst *int) error {
	v, err := oneArg(d)
	if err != nil {
		return err
	}
	if *dst, err = strconv.Atoi(v); err != nil {
		return d.Errf("%s: %v", opt, err)
	}
	return nil
}

// floatArg reads the option's one number argument into dst.
func floatArg(d *caddyfile.Dispenser, opt string, dst *float64) error {
	v, err := oneArg(d)
	if err != nil {
		return err
	}
	if *dst, err = strconv.ParseFloat(v, 64); err != nil {
		return d.Errf("%s: %v", opt, err)
	}
	return nil
}

// durationArg reads the option's one duration argument into dst.
func durationArg(d *caddyfile.Dispenser, opt string, dst *caddy.Duration) error {
	v, err := oneArg(d)
	if err != nil {
		return err
	}
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return d.Errf("%s: %v", opt, err)
	}
	*dst = caddy.Duration(dur)
	return nil
}

// positiveDuration reads v, the argument of option what, as a duration
// above zero.
func positiveDuration(d *caddyfile.Dispenser, what, v string) (caddy.Duration, error) {
	dur, err := caddy.ParseDuration(v)
	if err != nil || dur <= 0 {
		return 0, d.Errf("%s: want a positive duration, got %q", what, v)
	}
	return caddy.Duration(dur), nil
}

// humanizeSize parses sizes like "8MiB" or "512KB" into bytes.
func humanizeSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	return int64(n), err
}
