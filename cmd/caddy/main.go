// Command caddy is Caddy with the standard modules and llmroute, the same
// binary `./xcaddy.sh build` produces. It exists so that `go build
// ./cmd/caddy` works with this module's own go.mod and module cache.
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/llmroute/caddy-llmroute/caddymodule"
)

func main() {
	caddycmd.Main()
}
