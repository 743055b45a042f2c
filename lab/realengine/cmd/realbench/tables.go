package main

import (
	"fmt"
	"strings"
)

// markdownTables renders the results as the tables RESULTS.md quotes: the
// pooled figures per engine, workload and strategy; the same per seed; the
// reuse of answers in multi_turn; and why shared_prefix requests missed.
func markdownTables(out Output) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	each := func(f func(eng, wl, pol string, r *PolicyResult)) {
		for _, e := range out.Config.Engines {
			er := out.Engines[e.Name]
			if er == nil {
				continue
			}
			for _, wl := range out.Config.Workloads {
				for _, pol := range out.Config.Policies {
					if r := er.Workloads[wl][pol]; r != nil {
						f(e.Name, wl, pol, r)
					}
				}
			}
		}
	}
	prec := func(x float64, hits, misses int) string {
		if hits+misses == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", x)
	}
	ratio := func(x float64) string {
		if x == 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", x)
	}

	p("### Pooled over seeds\n\n")
	p("| engine | workload | strategy | TTFT p50 | TTFT p99 | p50 hit / miss | cached_token_rate | router precision (hit/miss/concurrent/cold) | predicted / reported | router bytes per token | complete |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|\n")
	each(func(eng, wl, pol string, r *PolicyResult) {
		p("| %s | %s | %s | %.0f ms | %.0f ms | %.0f / %.0f ms | %.3f | %s (%d/%d/%d/%d) | %s | %.2f | %d/%d |\n", eng, wl, pol,
			r.TTFTP50, r.TTFTP99, r.TTFTP50Hit, r.TTFTP50Miss, r.CachedTokenRate,
			prec(r.Router.Precision, r.Router.Hits, r.Router.Misses), r.Router.Hits, r.Router.Misses, r.Router.Concurrent, r.Router.Cold,
			ratio(r.Router.PredictedOverReported), r.RouterBytesPerToken, r.Completed, r.Requests)
	})

	p("\n### Per seed\n\n")
	p("| engine | workload | strategy | seed | TTFT p50 | TTFT p99 | cached_token_rate | router precision (hit/miss/concurrent/cold) | predicted / reported | purges | replicas per group | groups by main replica | load (1 min) |\n")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	each(func(eng, wl, pol string, r *PolicyResult) {
		for _, run := range r.Runs {
			split, homes := "–", "–"
			if run.GroupSplit > 0 {
				split = fmt.Sprintf("%.2f", run.GroupSplit)
				homes = fmt.Sprintf("%d/%d", run.GroupHomes["replica-a"], run.GroupHomes["replica-b"])
			}
			load := run.LoadEnd
			if f := strings.Fields(load); len(f) > 0 {
				load = f[0]
			}
			p("| %s | %s | %s | %d | %.0f ms | %.0f ms | %.3f | %s (%d/%d/%d/%d) | %s | %d | %s | %s | %s |\n", eng, wl, pol, run.Seed,
				run.TTFTP50, run.TTFTP99, run.CachedTokenRate, prec(run.Precision, run.Hits, run.Misses),
				run.Hits, run.Misses, run.Concurrent, run.Cold, ratio(run.PredictedOverReported), run.Purges, split, homes, load)
		}
	})

	p("\n### multi_turn: the engine's answers in the next turn\n\n")
	p("| engine | strategy | seed | later turns on the slot holding the previous turn | elsewhere | answer tokens reused token for token |\n")
	p("|---|---|---|---|---|---|\n")
	each(func(eng, wl, pol string, r *PolicyResult) {
		if wl != "multi_turn" {
			return
		}
		for _, run := range r.Runs {
			if a := run.Answers; a != nil {
				p("| %s | %s | %d | %d | %d | %d of %d (%.2f) |\n", eng, pol, run.Seed, a.Turns, a.Elsewhere, a.Reused, a.AnswerTokens, a.Rate)
			}
		}
		if a := r.Answers; a != nil {
			p("| %s | %s | pooled | %d | %d | %d of %d (%.2f) |\n", eng, pol, a.Turns, a.Elsewhere, a.Reused, a.AnswerTokens, a.Rate)
		}
	})

	p("\n### Why requests of a group or conversation did or did not hit (engine side, pooled)\n\n")
	p("| engine | workload | strategy | hit | first | routed elsewhere | evicted | concurrent |\n")
	p("|---|---|---|---|---|---|---|---|\n")
	each(func(eng, wl, pol string, r *PolicyResult) {
		if len(r.Misses) == 0 {
			return
		}
		m := r.Misses
		p("| %s | %s | %s | %d | %d | %d | %d | %d |\n", eng, wl, pol, m["hit"], m["first"], m["routed_elsewhere"], m["evicted"], m["concurrent"])
	})
	return b.String()
}
