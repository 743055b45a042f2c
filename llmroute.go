// Package llmroute plugs llmroute's modules into Caddy: import it (xcaddy
// build --with github.com/llmroute/caddy-llmroute) to get the llm_route
// handler, the `llm` load-balancing policy and the /llm_route/state admin
// endpoint. The code lives in caddymodule/ (the Caddy adapter) and
// policies/ (the routing decisions).
package llmroute

import (
	// Register the modules.
	_ "github.com/llmroute/caddy-llmroute/caddymodule"
)
