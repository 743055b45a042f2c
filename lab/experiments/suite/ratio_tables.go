package suite

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Ratio is a figure of one policy's point read against the other
// policies of the same cell (workload or unique share, router count and
// seed), as docs/experiments.md's tables of the mixed sweep and the
// variants give it.
type Ratio int

// Ratios.
const (
	// TailRatio is TTFT p99 over the better of round_robin's and
	// least_load's (issue 18's tail goal: <= 1.10).
	TailRatio Ratio = iota
	// MedianRatio is TTFT p50 over the best of the other RouterPolicies'
	// (the policy itself left out, so a policy better than every other
	// reads below 1).
	MedianRatio
	// HitRatio is the token hit rate over the better of
	// prefix_affinity's and the oracle's ("-" where both are 0).
	HitRatio
	// AgreementRatio is the agreement on first placements ("-" where no
	// prefix reached two routers).
	AgreementRatio
)

// Of renders the ratio of policy name's point pt against the cell's
// points f, by policy.
func (r Ratio) Of(name string, pt SweepPoint, f map[string]SweepPoint) string {
	switch r {
	case TailRatio:
		return fmt.Sprintf("%.2f", pt.TTFTP99Ms/math.Min(f["round_robin"].TTFTP99Ms, f["least_load"].TTFTP99Ms))
	case MedianRatio:
		best := math.Inf(1)
		for _, p := range RouterPolicies {
			if o, ok := f[p]; ok && p != name {
				best = math.Min(best, o.TTFTP50Ms)
			}
		}
		return fmt.Sprintf("%.2f", pt.TTFTP50Ms/best)
	case HitRatio:
		best := math.Max(f["prefix_affinity"].TokenHitRate, f["oracle"].TokenHitRate)
		if best <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", pt.TokenHitRate/best)
	default:
		if pt.AgreementKeys == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", pt.Agreement)
	}
}

// perSeed renders r for policy name in every seed's cell, in seed
// order, joined by " / " ("-" for a seed whose cell lacks the policy).
func perSeed(r Ratio, name string, seeds []uint64, cell func(seed uint64) map[string]SweepPoint) string {
	s := make([]string, len(seeds))
	for i, seed := range seeds {
		f := cell(seed)
		if pt, ok := f[name]; ok {
			s[i] = r.Of(name, pt, f)
		} else {
			s[i] = "-"
		}
	}
	return strings.Join(s, " / ")
}

// pointSeeds returns the seeds of points in increasing order.
func pointSeeds(points []SweepPoint) []uint64 {
	seen := map[uint64]bool{}
	var seeds []uint64
	for _, p := range points {
		if !seen[p.Seed] {
			seen[p.Seed] = true
			seeds = append(seeds, p.Seed)
		}
	}
	sort.Slice(seeds, func(i, j int) bool { return seeds[i] < seeds[j] })
	return seeds
}

// mixedGroups are the column groups of MixedRatiosTable: a policy of the
// mixed sweep at a router count.
var mixedGroups = []struct {
	title, policy string
	routers       int
}{
	{"1 router", "prefix_load", 1},
	{"1 router, peers none", AlonePolicy, 1},
	{"8 routers", "prefix_load", 8},
	{"8 routers, shared homes", SharedHomesPolicy, 8},
}

// MixedRatiosTable renders docs/experiments.md's table of the mixed
// sweep: per unique share, prefix_load with one router, told it is
// alone, with eight routers and with eight and shared homes, each with
// its TailRatio, MedianRatio and HitRatio per seed.
func MixedRatiosTable(rec *SweepRecord) string {
	figs, _ := CellFigures(rec.Points, func(p SweepPoint) GoalCell { return GoalCell{Share: p.Value, Routers: p.Routers, Seed: p.Seed} })
	seeds := pointSeeds(rec.Points)
	var b strings.Builder
	b.WriteString("| unique share |")
	for _, g := range mixedGroups {
		fmt.Fprintf(&b, " %s: p99 | p50 | hit |", g.title)
	}
	b.WriteString("\n|---:|")
	for range mixedGroups {
		b.WriteString("---|---|---|")
	}
	b.WriteString("\n")
	for _, u := range rec.Values {
		fmt.Fprintf(&b, "| %g |", u)
		for _, g := range mixedGroups {
			cell := func(seed uint64) map[string]SweepPoint {
				return figs[GoalCell{Share: u, Routers: g.routers, Seed: seed}]
			}
			for _, r := range []Ratio{TailRatio, MedianRatio, HitRatio} {
				fmt.Fprintf(&b, " %s |", perSeed(r, g.policy, seeds, cell))
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// VariantColumn is a column of VariantRatiosTable: one Ratio of each
// variant on one workload with some routers, per seed.
type VariantColumn struct {
	Title    string
	Workload string
	Routers  int
	Ratio    Ratio
}

// VariantRatiosTable renders a table of the variants record: one row
// per prefix_load variant (the references left out), one column per
// VariantColumn, each cell the seeds' figures in seed order.
func VariantRatiosTable(rec *VariantsRecord, cols []VariantColumn) string {
	figs, _ := CellFigures(rec.Points, func(p SweepPoint) GoalCell { return GoalCell{Workload: p.Workload, Routers: p.Routers, Seed: p.Seed} })
	var b strings.Builder
	b.WriteString("| variant |")
	for _, c := range cols {
		fmt.Fprintf(&b, " %s |", c.Title)
	}
	b.WriteString("\n|---|" + strings.Repeat("---|", len(cols)) + "\n")
	for _, v := range rec.Variants {
		if v.Policy != "prefix_load" {
			continue
		}
		fmt.Fprintf(&b, "| %s |", v.Name)
		for _, c := range cols {
			cell := func(seed uint64) map[string]SweepPoint {
				return figs[GoalCell{Workload: c.Workload, Routers: c.Routers, Seed: seed}]
			}
			fmt.Fprintf(&b, " %s |", perSeed(c.Ratio, v.Name, rec.Seeds, cell))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// VariantChangeTable renders, for one workload, variant from's Ratio
// against variant to's per router count (1 left out) and seed: one row,
// "from -> to" per router count, as docs/experiments.md shows what
// unique_run changed.
func VariantChangeTable(rec *VariantsRecord, kind string, r Ratio, from, to string) string {
	figs, _ := CellFigures(rec.Points, func(p SweepPoint) GoalCell { return GoalCell{Workload: p.Workload, Routers: p.Routers, Seed: p.Seed} })
	var head, sep, row strings.Builder
	head.WriteString("| routers |")
	sep.WriteString("|---|")
	row.WriteString("| ratio |")
	for _, n := range rec.Routers {
		if n == 1 {
			continue
		}
		cell := func(seed uint64) map[string]SweepPoint {
			return figs[GoalCell{Workload: kind, Routers: n, Seed: seed}]
		}
		fmt.Fprintf(&head, " %d |", n)
		sep.WriteString("---|")
		fmt.Fprintf(&row, " %s -> %s |", perSeed(r, from, rec.Seeds, cell), perSeed(r, to, rec.Seeds, cell))
	}
	return head.String() + "\n" + sep.String() + "\n" + row.String() + "\n"
}
