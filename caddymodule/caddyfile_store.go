package caddymodule

import (
	"strings"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
)

// parseSharedStore reads
//
//	shared_store <url> {
//		key_prefix <prefix>
//		timeout    <duration>
//		tls_ca     <pem file>
//	}
func parseSharedStore(d *caddyfile.Dispenser) (*SharedStoreConfig, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	cfg := &SharedStoreConfig{URL: d.Val()}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	// A URL with placeholders is checked once they are resolved (parsed stays
	// nil).
	var parsed *redis.Options
	if !strings.Contains(cfg.URL, "{") {
		var err error
		if parsed, err = parseStoreURL(cfg.URL); err != nil {
			return nil, d.Errf("shared_store: %v", err)
		}
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		opt := d.Val()
		if !d.NextArg() {
			return nil, d.ArgErr()
		}
		switch opt {
		case "key_prefix":
			cfg.KeyPrefix = d.Val()
		case "tls_ca":
			if parsed != nil && parsed.TLSConfig == nil {
				return nil, d.Errf("shared_store: %v, got %s", errTLSCANeedsRediss, redactURL(cfg.URL))
			}
			cfg.TLSCA = d.Val()
		case "timeout":
			dur, err := positiveDuration(d, "shared_store timeout", d.Val())
			if err != nil {
				return nil, err
			}
			cfg.Timeout = dur
		default:
			return nil, d.Errf("unrecognized shared_store option %q", opt)
		}
		if d.NextArg() {
			return nil, d.ArgErr()
		}
	}
	return cfg, nil
}
