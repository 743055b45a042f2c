package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// parseHomesDirectory parses
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
