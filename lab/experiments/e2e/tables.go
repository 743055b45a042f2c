package e2e

import (
	"fmt"
	"strings"

	"github.com/llmroute/caddy-llmroute/lab/experiments/suite"
)

// The tables of docs/experiments.md's end-to-end sections: what the
// client saw, read against the references of the same workload and
// router count, bold where issue 18's goal (suite.GoalsOf) is missed.
// e2e.md has every figure of every run.

// Column is a column of a table of runs: one policy's figures, headed
// Title.
type Column struct {
	Title, Policy string
}

// runCells groups a record's runs by workload and router count, in the
// order they first appear.
type runCells struct {
	keys  []cellKey
	cells map[cellKey]map[string]Cell
}

type cellKey struct {
	workload string
	routers  int
}

func cellsOf(recs ...*Record) runCells {
	c := runCells{cells: map[cellKey]map[string]Cell{}}
	for _, rec := range recs {
		for _, r := range rec.Runs {
			k := cellKey{r.Workload, r.Routers}
			if c.cells[k] == nil {
				c.cells[k] = map[string]Cell{}
				c.keys = append(c.keys, k)
			}
			c.cells[k][r.Policy] = r
		}
	}
	return c
}

// runPoint is what suite.GoalsOf reads of a run.
func runPoint(r Cell) suite.SweepPoint {
	p := r.Result
	return suite.SweepPoint{Workload: r.Workload, Policy: r.Policy, Routers: r.Routers, TokenHitRate: p.TokenHitRate,
		TTFTP50Ms: p.TTFT.P50, TTFTP90Ms: p.TTFT.P90, TTFTP99Ms: p.TTFT.P99, Agreement: p.Agreement, AgreementKeys: p.AgreementKeys}
}

// figures are one run's figures read against its cell's references.
type figures struct {
	p99, tail, hit, hitRatio, agreement float64
	hasHit, hasAgreement                bool
	// met says, by goal name (suite.GoalTail, GoalHit, GoalAgreement),
	// whether the run meets it.
	met map[string]bool
}

// figuresOf reads policy's run in cell k: TTFT p99 over the better of
// round_robin's and least_load's, the hit rate over prefix_affinity's
// (none where that is 0), the agreement on new prefixes (with several
// routers), and which goals it meets by suite.GoalsOf. ok is false where
// the cell lacks the policy or a reference.
func (c runCells) figuresOf(k cellKey, policy string) (f figures, ok bool) {
	cell := c.cells[k]
	r, ok := cell[policy]
	rr, okR := cell["round_robin"]
	ll, okL := cell["least_load"]
	if !ok || !okR || !okL {
		return f, false
	}
	pts := map[string]suite.SweepPoint{}
	for name, run := range cell {
		pts[name] = runPoint(run)
	}
	one, hasOne := suite.SweepPoint{}, false
	if r1, ok := c.cells[cellKey{k.workload, 1}][policy]; ok {
		one, hasOne = runPoint(r1), true
	}
	f.met = map[string]bool{}
	for _, g := range suite.GoalsOf(k.workload, k.routers, pts[policy], pts, one, hasOne) {
		f.met[g.Name] = g.Met
	}
	f.p99 = r.Result.TTFT.P99
	f.tail = f.p99 / min(rr.Result.TTFT.P99, ll.Result.TTFT.P99)
	f.hit = r.Result.TokenHitRate
	if pa, ok := cell["prefix_affinity"]; ok && pa.Result.TokenHitRate > 0 {
		f.hitRatio, f.hasHit = f.hit/pa.Result.TokenHitRate, true
	}
	if k.routers > 1 && r.Result.AgreementKeys > 0 {
		f.agreement, f.hasAgreement = r.Result.Agreement, true
	}
	return f, true
}

// bold renders s in bold where a goal is missed.
func bold(s string, met bool) string {
	if met {
		return s
	}
	return "**" + s + "**"
}

// labels names a cell's figures after the first where they first appear
// in a table (a legend), and not again.
type labels map[string]bool

func (l labels) of(name string) string {
	if l[name] {
		return ""
	}
	l[name] = true
	return name + " "
}

// columnsHead writes a table's header: the leading cells and their
// separator row, then one left-aligned column per policy.
func columnsHead(b *strings.Builder, lead, leadSep string, cols []Column) {
	b.WriteString(lead)
	for _, col := range cols {
		fmt.Fprintf(b, " %s |", col.Title)
	}
	b.WriteString("\n" + leadSep + strings.Repeat("---|", len(cols)) + "\n")
}

// CompareTable renders a record's runs per workload and router count:
// round_robin's TTFT p99, then per column the policy's TTFT p99 (its
// ratio to the better of round_robin and least_load) and hit rate (its
// ratio to prefix_affinity's), as docs/experiments.md's "End to end"
// gives e2e.json.
func CompareTable(rec *Record, cols []Column) string {
	c := cellsOf(rec)
	var b strings.Builder
	columnsHead(&b, "| workload | routers | round_robin p99 |", "|---|---:|---:|", cols)
	l := labels{}
	for _, k := range c.keys {
		rr, ok := c.cells[k]["round_robin"]
		if !ok {
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f |", k.workload, k.routers, rr.Result.TTFT.P99)
		for _, col := range cols {
			f, ok := c.figuresOf(k, col.Policy)
			if !ok {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %.1f (%s)", f.p99, bold(fmt.Sprintf("%.2f", f.tail), f.met[suite.GoalTail]))
			if f.hasHit {
				fmt.Fprintf(&b, ", %s%.3f (%s)", l.of("hit"), f.hit, bold(fmt.Sprintf("%.2f", f.hitRatio), f.met[suite.GoalHit]))
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// GoalRatiosTable renders a record's runs per workload and router count:
// per column the policy's TTFT p99 over the better of round_robin and
// least_load, its hit rate over prefix_affinity's and, with several
// routers, its agreement on new prefixes, as docs/experiments.md gives
// e2e_goals.json.
func GoalRatiosTable(rec *Record, cols []Column) string {
	c := cellsOf(rec)
	var b strings.Builder
	columnsHead(&b, "| workload | routers |", "|---|---:|", cols)
	l := labels{}
	for _, k := range c.keys {
		fmt.Fprintf(&b, "| %s | %d |", k.workload, k.routers)
		for _, col := range cols {
			f, ok := c.figuresOf(k, col.Policy)
			if !ok {
				b.WriteString(" - |")
				continue
			}
			fmt.Fprintf(&b, " %s", bold(fmt.Sprintf("%.2f", f.tail), f.met[suite.GoalTail]))
			if f.hasHit {
				fmt.Fprintf(&b, ", %s%s", l.of("hit"), bold(fmt.Sprintf("%.3f", f.hitRatio), f.met[suite.GoalHit]))
			}
			if f.hasAgreement {
				fmt.Fprintf(&b, ", %s%s", l.of("agree"), bold(fmt.Sprintf("%.3f", f.agreement), f.met[suite.GoalAgreement]))
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TailTable renders the runs of several records per workload and router
// count, record by record: TTFT p99 of round_robin and least_load, then
// per column the policy's TTFT p99 and its ratio to the better of the
// two, and the first column's hit rate (round_robin's), as
// docs/experiments.md gives the unique_run records.
func TailTable(cols []Column, recs ...*Record) string {
	var b strings.Builder
	b.WriteString("| workload | routers | round_robin | least_load |")
	for _, col := range cols {
		fmt.Fprintf(&b, " %s | ratio |", col.Title)
	}
	fmt.Fprintf(&b, " %s hit rate (round_robin) |\n|---|---:|---:|---:|%s---|\n", cols[0].Title, strings.Repeat("---:|---:|", len(cols)))
	for _, rec := range recs {
		c := cellsOf(rec)
		for _, k := range c.keys {
			rr, okR := c.cells[k]["round_robin"]
			ll, okL := c.cells[k]["least_load"]
			if !okR || !okL {
				continue
			}
			fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f |", k.workload, k.routers, rr.Result.TTFT.P99, ll.Result.TTFT.P99)
			for _, col := range cols {
				f, ok := c.figuresOf(k, col.Policy)
				if !ok {
					b.WriteString(" - | - |")
					continue
				}
				fmt.Fprintf(&b, " %.1f | %s |", f.p99, bold(fmt.Sprintf("%.2f", f.tail), f.met[suite.GoalTail]))
			}
			hit := "-"
			if f, ok := c.figuresOf(k, cols[0].Policy); ok {
				hit = "0"
				if f.hit > 0 || rr.Result.TokenHitRate > 0 {
					hit = fmt.Sprintf("%.3f (%.3f)", f.hit, rr.Result.TokenHitRate)
				}
			}
			fmt.Fprintf(&b, " %s |\n", hit)
		}
	}
	return b.String()
}
