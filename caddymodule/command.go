package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/caddyserver/caddy/v2"
	caddycmd "github.com/caddyserver/caddy/v2/cmd"
	"github.com/spf13/cobra"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
)

func init() {
	caddycmd.RegisterCommand(caddycmd.Command{
		Name:  "llm",
		Short: "Commands for a running llmroute",
		Long: `
Reads the router state of a running Caddy with llmroute through its admin API.

  caddy llm status    each pool's replicas: in flight / cap, cooldown and
                      reason, engine queue and KV usage, prediction
                      precision, sessions; and the tenants
`,
		CobraFunc: func(cmd *cobra.Command) {
			status := &cobra.Command{
				Use:   "status [--address <admin>] [--config <path> [--adapter <name>]] [--json] [--watch [--interval <duration>]]",
				Short: "Shows each pool's replicas and the tenants from the admin API",
				Long: `
Reads GET /llm_route/state from the admin API and prints, for each pool (each
reverse_proxy with lb_policy llm), its replicas: the requests in flight
against the pool's max_in_flight, a cooldown (time left and reason), the
engine's waiting and running requests and KV cache usage (engine_metrics),
the share of the router's prefix predictions the engine confirmed, and the
sessions bound to the replica; then each tenant's requests and budgets.

The admin address is --address, else the one of the config named by --config,
else Caddy's default (localhost:2019). --json prints the state as the admin
API returns it, for scripts. --watch prints it again every --interval
(default 2s) until interrupted; with --json, one JSON document per line.
`,
				RunE: caddycmd.WrapCommandFuncForCobra(cmdLLMStatus),
			}
			status.Flags().String("address", "", "The admin API's address")
			status.Flags().StringP("config", "c", "", "The config to read the admin address from")
			status.Flags().StringP("adapter", "a", "", "The config's adapter")
			status.Flags().Bool("json", false, "Print the state as JSON")
			status.Flags().BoolP("watch", "w", false, "Print the state again every --interval")
			status.Flags().String("interval", "2s", "How often --watch prints")
			cmd.AddCommand(status)
		},
	})
}

// cmdLLMStatus is `caddy llm status`.
func cmdLLMStatus(fl caddycmd.Flags) (int, error) {
	addr, err := caddycmd.DetermineAdminAPIAddress(fl.String("address"), nil, fl.String("config"), fl.String("adapter"))
	if err != nil {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("admin address: %v", err)
	}
	asJSON, watch := fl.Bool("json"), fl.Bool("watch")
	interval := fl.Duration("interval")
	if watch && interval <= 0 {
		return caddy.ExitCodeFailedStartup, fmt.Errorf("--interval must be a positive duration, got %q", fl.String("interval"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	for {
		body, err := fetchState(addr)
		if err != nil {
			return caddy.ExitCodeFailedStartup, err
		}
		if watch && !asJSON {
			fmt.Print("\x1b[H\x1b[2J") // home and clear: the table redrawn in place
			fmt.Printf("%s  %s\n\n", addr, time.Now().Format(time.TimeOnly))
		}
		if err := printState(os.Stdout, body, asJSON && !watch, asJSON, time.Now()); err != nil {
			return caddy.ExitCodeFailedStartup, err
		}
		if !watch {
			return 0, nil
		}
		select {
		case <-ctx.Done():
			return 0, nil
		case <-time.After(interval):
		}
	}
}

// fetchState reads the state's JSON from the admin API at addr.
func fetchState(addr string) ([]byte, error) {
	resp, err := caddycmd.AdminAPIRequest(addr, http.MethodGet, stateapi.Path, nil, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
}

// printState writes the state body as a table, as indented JSON (indent)
// or as one line of JSON (asJSON without indent).
func printState(w io.Writer, body []byte, indent, asJSON bool, now time.Time) error {
	if asJSON {
		var out bytes.Buffer
		var err error
		if indent {
			err = json.Indent(&out, body, "", "  ")
		} else {
			err = json.Compact(&out, body)
		}
		if err != nil {
			return fmt.Errorf("the admin API's state is not JSON: %v", err)
		}
		out.WriteByte('\n')
		_, err = w.Write(out.Bytes())
		return err
	}
	var st stateapi.State
	if err := json.Unmarshal(body, &st); err != nil {
		return fmt.Errorf("decoding the admin API's state: %v", err)
	}
	return renderStatus(w, st, now)
}
