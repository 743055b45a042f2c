package caddymodule

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
)

// The table `caddy llm status` prints (command.go): for each pool (live
// llm policy) its replicas, with what an operator checks first: the slots
// taken against the cap, a cooldown and why, the engine's queue and KV
// usage, how the router's predictions fare, the sessions bound there.

// renderStatus writes st as tables, cooldowns counted down from now.
func renderStatus(w io.Writer, st stateapi.State, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	byAddr := make(map[string]stateapi.Replica, len(st.Replicas))
	for _, r := range st.Replicas {
		byAddr[r.Addr] = r
	}
	shown := map[string]bool{}
	for i, p := range st.Policies {
		fmt.Fprintf(tw, "POOL %d\t%s\tmax_in_flight %d\tqueued %d/%d\n", i+1, p.Strategy, p.MaxInFlight, p.Queued, p.QueueSize)
		var rows []stateapi.Replica
		for _, a := range p.Replicas {
			if r, ok := byAddr[a]; ok {
				rows = append(rows, r)
				shown[a] = true
			}
		}
		writeReplicas(tw, rows, p.MaxInFlight, now)
		fmt.Fprintln(tw)
	}
	var rest []stateapi.Replica
	for _, r := range st.Replicas {
		if !shown[r.Addr] {
			rest = append(rest, r)
		}
	}
	if len(rest) > 0 {
		fmt.Fprintln(tw, "REPLICAS OF NO LIVE POOL")
		writeReplicas(tw, rest, 0, now)
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "in flight %d, queued %d\n", st.TotalInFlight, st.Queued)
	if len(st.Tenants) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "TENANT\tIN FLIGHT\tQUEUED\tPRIORITY\tREQUESTS/MIN LEFT\tTOKENS/MIN LEFT\tTOKENS CHARGED")
		for _, t := range st.Tenants {
			inFlight := strconv.Itoa(t.InFlight)
			if t.MaxInFlight > 0 {
				inFlight += "/" + strconv.Itoa(t.MaxInFlight)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%.0f\n", t.Name, inFlight, t.Queued, t.Priority,
				budgetCell(t.RequestsLeft, t.RequestsPerMinute), budgetCell(t.TokensLeft, t.TokensPerMinute), t.TokensCharged)
		}
	}
	return tw.Flush()
}

// writeReplicas writes one pool's replica rows under their header; cap is
// the pool's max_in_flight (0: unknown).
func writeReplicas(tw io.Writer, rows []stateapi.Replica, limit int, now time.Time) {
	fmt.Fprintln(tw, "REPLICA\tIN FLIGHT\tCOOLDOWN\tENGINE WAIT/RUN\tKV\tPRECISION\tSESSIONS")
	for _, r := range rows {
		inFlight := strconv.Itoa(r.InFlight)
		if limit > 0 {
			inFlight += "/" + strconv.Itoa(limit)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", r.Addr, inFlight, cooldownCell(r, now),
			engineCell(r.Engine), kvCell(r.Engine), precisionCell(r.Feedback), r.Sessions)
	}
}

// cooldownCell says whether the replica is out: cooling (time left and
// reason), waiting for its probe, draining; "-" when it takes traffic.
func cooldownCell(r stateapi.Replica, now time.Time) string {
	var parts []string
	if r.Cooling {
		c := "cooling"
		if r.CoolUntil != nil {
			c += " " + r.CoolUntil.Sub(now).Round(100*time.Millisecond).String()
		}
		if r.CoolReason != "" {
			c += " (" + r.CoolReason + ")"
		}
		parts = append(parts, c)
	}
	switch {
	case r.Probing:
		parts = append(parts, "probing")
	case r.NeedProbe:
		parts = append(parts, "needs probe")
	}
	if r.Draining {
		parts = append(parts, "draining")
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// engineCell is the engine's waiting and running requests at its last
// scrape ("-" without engine_metrics, "stale" when the scrape is old).
func engineCell(e *stateapi.Engine) string {
	switch {
	case e == nil:
		return "-"
	case e.Stale:
		return "stale"
	}
	return strconv.FormatFloat(e.Waiting, 'f', -1, 64) + "/" + strconv.FormatFloat(e.Running, 'f', -1, 64)
}

// kvCell is the engine's KV cache usage in percent.
func kvCell(e *stateapi.Engine) string {
	if e == nil || e.Stale || e.KVUsage < 0 {
		return "-"
	}
	return strconv.FormatFloat(100*e.KVUsage, 'f', 0, 64) + "%"
}

// precisionCell is the share of checked predictions that were right, and
// how many were checked.
func precisionCell(f stateapi.Feedback) string {
	if f.Checks == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f (%d checks)", f.Precision, f.Checks)
}

// budgetCell is what is left of a per-minute budget ("-" for none).
func budgetCell(left float64, limit int) string {
	if limit <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f/%d", left, limit)
}
