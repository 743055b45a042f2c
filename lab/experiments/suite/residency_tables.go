package suite

import (
	"fmt"
	"strings"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// The tables of docs/cache-residency.md: each a scenario of the
// residency record, cut down to the figures its section discusses.
// residency.md has every figure of every row.

// lostTrack is the precision below which docs/cache-residency.md's tables
// set the optimistic index's (mode none) in bold: it no longer knows
// what the engine holds.
const lostTrack = 0.9

// recallGoal is issue 18's goal for the index's recall with one router,
// in bold in the answers table where it is met.
const recallGoal = 0.97

// residencyRows indexes a residency record's rows of one scenario.
type residencyRows struct {
	rows   map[residencyKey]ResidencyRow
	values []float64 // knob values in record order
}

type residencyKey struct {
	kind, mode, policy string
	v                  float64
}

func scenarioRows(rec *ResidencyRecord, scn string) residencyRows {
	r := residencyRows{rows: map[residencyKey]ResidencyRow{}}
	seen := map[float64]bool{}
	for _, row := range rec.Rows {
		if row.Scenario != scn {
			continue
		}
		r.rows[residencyKey{row.Workload, row.Mode, row.Policy, row.Value}] = row
		if !seen[row.Value] {
			seen[row.Value] = true
			r.values = append(r.values, row.Value)
		}
	}
	return r
}

// figs renders f of the rows of kind at v, one per mode and policy
// (mode:policy, policy defaulting to prefix_load), joined by " / "; "-"
// for a row the record lacks.
func (r residencyRows) figs(kind string, v float64, f func(ResidencyRow) string, modes ...string) string {
	s := make([]string, len(modes))
	for i, m := range modes {
		mode, policy, ok := strings.Cut(m, ":")
		if !ok {
			policy = "prefix_load"
		}
		row, ok := r.rows[residencyKey{kind, mode, policy, v}]
		if !ok {
			s[i] = "-"
			continue
		}
		s[i] = f(row)
	}
	return strings.Join(s, " / ")
}

func prec(r ResidencyRow) string   { return fmt.Sprintf("%.3f", r.Precision) }
func recall(r ResidencyRow) string { return fmt.Sprintf("%.3f", r.Recall) }
func hit(r ResidencyRow) string    { return fmt.Sprintf("%.3f", r.TokenHitRate) }
func p99(r ResidencyRow) string    { return fmt.Sprintf("%.1f", r.TTFTP99Ms) }

// precBold is prec, in bold where the optimistic index lost track.
func precBold(r ResidencyRow) string {
	if r.Mode == "none" && r.Precision < lostTrack {
		return "**" + prec(r) + "**"
	}
	return prec(r)
}

// ResidencyKVTable renders the KV scenario on shared_prefix: precision
// per mode and hit rate without and with both corrections, and with both
// from an engine that reports no cache size, per KV size.
func ResidencyKVTable(rec *ResidencyRecord) string {
	r := scenarioRows(rec, "kv")
	var b strings.Builder
	fmt.Fprintf(&b, "| KV blocks | shared_prefix precision %s | hit rate none / both / unsized |\n|---:|---|---|\n", strings.Join(Modes, " / "))
	for _, v := range r.values {
		k := workload.SharedPrefix
		fmt.Fprintf(&b, "| %s | %s | %s |\n", Thousands(v), r.figs(k, v, precBold, Modes...), r.figs(k, v, hit, "none", "both", "unsized"))
	}
	return b.String()
}

// ResidencyPrefixesTable renders the prefixes scenario: per group count,
// the working set over all replicas' caches, and precision, hit rate and
// TTFT p99 without and with both corrections.
func ResidencyPrefixesTable(rec *ResidencyRecord) string {
	r := scenarioRows(rec, "prefixes")
	groupBlocks := float64(WorkloadParams(workload.SharedPrefix, 1, 1).SystemTokens) / simengine.DefaultBlockSize
	caches := float64(rec.Standard.Replicas * rec.Standard.KVBlocks)
	var b strings.Builder
	b.WriteString("| groups | working set / all caches | precision none / both | hit rate none / both | TTFT p99 ms none / both |\n|---:|---:|---|---|---|\n")
	for _, v := range r.values {
		k := workload.SharedPrefix
		fmt.Fprintf(&b, "| %s | %.1gx | %s | %s | %s |\n", Thousands(v), v*groupBlocks/caches,
			r.figs(k, v, precBold, "none", "both"), r.figs(k, v, hit, "none", "both"), r.figs(k, v, p99, "none", "both"))
	}
	return b.String()
}

// ResidencyRestartsTable renders the restarts scenario on shared_prefix:
// precision and hit rate per mode and TTFT p99 without and with both
// corrections, per restart interval.
func ResidencyRestartsTable(rec *ResidencyRecord) string {
	r := scenarioRows(rec, "restarts")
	var b strings.Builder
	modes := strings.Join(Modes, " / ")
	fmt.Fprintf(&b, "| restart every | shared_prefix precision %s | hit rate %s | TTFT p99 ms none / both |\n|---:|---|---|---|\n", modes, modes)
	for _, v := range r.values {
		k := workload.SharedPrefix
		every := "never"
		if v > 0 {
			every = fmt.Sprintf("%g s", v)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", every, r.figs(k, v, prec, Modes...), r.figs(k, v, hit, Modes...), r.figs(k, v, p99, "none", "both"))
	}
	return b.String()
}

// ResidencyBlocksTable renders the blocks scenario on shared_prefix: the
// boundary error between the router's blocks and the engine's, and
// precision and recall, per router block size.
func ResidencyBlocksTable(rec *ResidencyRecord) string {
	r := scenarioRows(rec, "blocks")
	var b strings.Builder
	b.WriteString("| router block | mean predicted - true (tokens) | mean abs error | precision | recall |\n|---:|---:|---:|---:|---:|\n")
	for _, v := range r.values {
		row, ok := r.rows[residencyKey{workload.SharedPrefix, "both", "prefix_load", v}]
		if !ok {
			continue
		}
		size := fmt.Sprintf("%g B", v)
		if v == policies.DefaultBlockSize {
			size += " (default)"
		}
		fmt.Fprintf(&b, "| %s | %+.1f | %.1f | %.3f | %.3f |\n", size, row.BoundaryMeanTok, row.BoundaryAbsTok, row.Precision, row.Recall)
	}
	return b.String()
}

// ResidencyAnswersTable renders the answers scenario (multi_turn): recall,
// precision, hit rate and TTFT p99 without and with the answers indexed,
// per router count; recall with answers in bold where it meets the goal.
func ResidencyAnswersTable(rec *ResidencyRecord) string {
	r := scenarioRows(rec, "answers")
	recallBold := func(row ResidencyRow) string {
		if row.Mode == "answers" && row.Recall >= recallGoal {
			return "**" + recall(row) + "**"
		}
		return recall(row)
	}
	var b strings.Builder
	b.WriteString("| routers | recall without / with answers | precision without / with | hit rate without / with | TTFT p99 ms without / with |\n|---:|---|---|---|---|\n")
	for _, v := range r.values {
		k, modes := workload.MultiTurn, []string{"no answers", "answers"}
		fmt.Fprintf(&b, "| %g | %s | %s | %s | %s |\n", v, r.figs(k, v, recallBold, modes...), r.figs(k, v, prec, modes...),
			r.figs(k, v, hit, modes...), r.figs(k, v, p99, modes...))
	}
	return b.String()
}

// ResidencyRoutersTable renders the routers scenario with both
// corrections: multi_turn's recall, both workloads' hit rates of
// prefix_load, prefix_affinity and the oracle, and shared_prefix's
// precision, recall and TTFT p50, per router count.
func ResidencyRoutersTable(rec *ResidencyRecord) string {
	r := scenarioRows(rec, "routers")
	pols := []string{"both:prefix_load", "both:prefix_affinity", "both:oracle"}
	var b strings.Builder
	b.WriteString("| routers | multi_turn recall (prefix_load) | multi_turn hit rate prefix_load / prefix_affinity / oracle | " +
		"shared_prefix hit rate prefix_load / prefix_affinity / oracle | shared_prefix prefix_load precision / recall / TTFT p50 ms |\n|---:|---:|---|---|---|\n")
	for _, v := range r.values {
		sp := r.figs(workload.SharedPrefix, v, func(row ResidencyRow) string {
			return fmt.Sprintf("%.3f / %.3f / %.1f", row.Precision, row.Recall, row.TTFTP50Ms)
		}, "both")
		fmt.Fprintf(&b, "| %g | %s | %s | %s | %s |\n", v, r.figs(workload.MultiTurn, v, recall, "both"),
			r.figs(workload.MultiTurn, v, hit, pols...), r.figs(workload.SharedPrefix, v, hit, pols...), sp)
	}
	return b.String()
}
