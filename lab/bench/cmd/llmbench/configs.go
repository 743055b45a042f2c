package main

import (
	"fmt"
	"strings"
)

// Both Caddy configs share everything but llm_route and the policy: the
// same binary, globals, transport and retries, so that the difference is
// llmroute's own cost. No access logs, no `metrics` global (Caddy's
// per-request HTTP metrics would cost both sides alike and hide the
// difference); llmroute's own Prometheus counters are updated either way.

// caddyLogLevel is Caddy's log level in every config (-caddy-log-level).
var caddyLogLevel = "WARN"

const caddyGlobals = `{
	admin %s
	auto_https off
	persist_config off
	grace_period 1s
	log {
		output stderr
		level %s
	}
}
`

// reverseProxyTail is the part of the reverse_proxy block both configs
// share: retries before the first byte as in Caddyfile.example.
const reverseProxyTail = `		lb_retries 2
		lb_retry_match {
			expression ` + "`{rp.status_code} in [429, 503]`" + `
		}
		lb_retry_match {
			expression ` + "`{rp.is_transport_error} == true`" + `
		}
		transport http {
			dial_timeout 2s
			response_header_timeout 120s
		}
`

// stockCaddyfile is plain reverse_proxy with round robin.
func stockCaddyfile(admin, listen string, upstreams []string) string {
	return fmt.Sprintf(caddyGlobals, admin, caddyLogLevel) + fmt.Sprintf(`
http://%s {
	bind 127.0.0.1
	reverse_proxy %s {
		lb_policy round_robin
%s	}
}
`, listen, strings.Join(upstreams, " "), reverseProxyTail)
}

// llmCaddyfile is llm_route + lb_policy llm <strategy>, as in
// Caddyfile.example minus api_keys (stock Caddy authenticates nobody
// either), replica_header and engine_metrics (the fake upstream has no
// metrics). request_usage is on: it is what feeds the cache-residency
// check, and it has a cost (a body copy, usage chunks to read and strip).
// index_answers is on by default; answers false turns it off (the _lean
// targets).
func llmCaddyfile(admin, listen string, upstreams []string, strategy string, maxInFlight int, usage, answers bool) string {
	u := "\t\trequest_usage\n"
	if !usage {
		u = ""
	}
	a := ""
	if !answers {
		a = "\t\t\tindex_answers off\n"
	}
	return fmt.Sprintf(caddyGlobals, admin, caddyLogLevel) + fmt.Sprintf(`
http://%s {
	bind 127.0.0.1
	llm_route {
		deployment bench-model-v1
		max_body_bytes 8MiB
%s	}
	reverse_proxy %s {
		lb_policy llm {
			strategy %s
			max_in_flight %d
			queue_size 4096
			queue_timeout 30s
			cooldown 1s 30s
%s		}
%s	}
}
`, listen, u, strings.Join(upstreams, " "), strategy, maxInFlight, a, reverseProxyTail)
}

// haproxyConfig hashes the request body (HAProxy >= 2.6: balance hash
// <expr>) with consistent hashing bounded by hash-balance-factor 125,
// HAProxy's counterpart of prefix_load. req.body needs http-buffer-request;
// HAProxy buffers at most tune.bufsize (16 KiB by default) minus its
// reserve, so a 64 KiB body is hashed on its first ~15 KiB only, which is
// what a prefix hash wants anyway.
func haproxyConfig(listen string, upstreams []string, threads int, balance string) string {
	var servers strings.Builder
	for i, u := range upstreams {
		fmt.Fprintf(&servers, "\tserver s%d %s\n", i+1, u)
	}
	return fmt.Sprintf(`global
	nbthread %d
	maxconn 8000
	log stderr format raw local0 err

defaults
	mode http
	timeout connect 2s
	timeout client 120s
	timeout server 120s
	timeout http-request 30s
	option http-buffer-request
	http-reuse always

frontend fe
	bind %s
	default_backend be

backend be
	balance %s
	hash-type consistent
	hash-balance-factor 125
%s`, max(threads, 1), listen, balance, servers.String())
}
