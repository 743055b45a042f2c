package caddymodule

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

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

// humanizeSize parses sizes like "8MiB" or "512KB" into bytes.
func humanizeSize(s string) (int64, error) {
	n, err := humanize.ParseBytes(s)
	return int64(n), err
}
