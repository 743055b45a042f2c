package suite

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

// series is one named line or bar set.
type series struct {
	name   string
	xs, ys []float64
}

// policyColor gives every policy the same colour in every plot.
func policyColor(name string) color.Color {
	for i, p := range sim.Policies {
		if p == name {
			return plotutil.Color(i)
		}
	}
	for i, m := range Modes {
		if m == name {
			return plotutil.Color(i)
		}
	}
	for i, m := range agreementSettings {
		if m == name {
			return plotutil.Color(len(Modes) + i)
		}
	}
	return color.Black
}

// agreementSettings are the rows of the residency analysis's agreement
// scenario besides the shipped "both".
var agreementSettings = []string{"cold_choices 1", "cold_slack 0", "shared homes", "cold_choices 3"}

func policyDashes(name string) []vg.Length {
	switch name {
	case "prefix_load", "both":
		return nil
	case "oracle":
		return []vg.Length{vg.Points(2), vg.Points(2)}
	}
	return []vg.Length{vg.Points(6), vg.Points(2)}
}

// linePlot draws one line per series and saves it as PNG.
func linePlot(path, title, xlabel, ylabel string, logX bool, ss []series) error {
	return linePlotL(path, title, xlabel, ylabel, logX, false, ss)
}

// linePlotL is linePlot with the legend at the bottom right when
// legendBottom (for CDFs, whose lower right is empty).
func linePlotL(path, title, xlabel, ylabel string, logX, legendBottom bool, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.TickerFunc(ticks125)
		// A sweep's few values label themselves.
		xs := map[float64]bool{}
		for _, s := range ss {
			for _, x := range s.xs {
				xs[x] = true
			}
		}
		if len(xs) <= 8 {
			var ts []plot.Tick
			for x := range xs {
				ts = append(ts, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'g', -1, 64)})
			}
			sort.Slice(ts, func(i, j int) bool { return ts[i].Value < ts[j].Value })
			p.X.Tick.Marker = plot.ConstantTicks(ts)
		}
	}
	if legendBottom {
		p.Legend.Top = false
	}
	for _, s := range ss {
		pts := make(plotter.XYs, 0, len(s.xs))
		for i := range s.xs {
			if logX && s.xs[i] <= 0 {
				continue
			}
			pts = append(pts, plotter.XY{X: s.xs[i], Y: s.ys[i]})
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = policyColor(s.name)
		l.Width = vg.Points(1.5)
		if s.name == "prefix_load" || s.name == "both" {
			l.Width = vg.Points(2.5)
		}
		l.Dashes = policyDashes(s.name)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return save(p, path, 7, 4.5)
}

// barPlot draws grouped bars: one group per label, one bar per series.
func barPlot(path, title, ylabel string, labels []string, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	w := vg.Points(84 / float64(max(len(ss), 1)))
	top := 0.0
	for _, s := range ss {
		for _, y := range s.ys {
			top = max(top, y)
		}
	}
	// Room above the bars for the legend.
	p.Y.Min, p.Y.Max = 0, top*1.45
	for i, s := range ss {
		b, err := plotter.NewBarChart(plotter.Values(s.ys), w)
		if err != nil {
			return err
		}
		b.LineStyle.Width = 0
		b.Color = policyColor(s.name)
		if b.Color == color.Black {
			b.Color = plotutil.Color(i)
		}
		b.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.NominalX(labels...)
	return save(p, path, 8, 4.5)
}

func save(p *plot.Plot, path string, wIn, hIn float64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(vg.Length(wIn)*vg.Inch, vg.Length(hIn)*vg.Inch, path)
}

// PlotStandard draws the standard point's plots: the TTFT CDF per policy
// for each workload, the hit rate per policy, and each policy's load share
// per replica.
func PlotStandard(dir string, rec *StandardRecord) error {
	kinds := sortedKinds(rec.Workloads)
	if err := plotWorkloads(dir, rec, kinds); err != nil {
		return err
	}
	var hits []series
	for _, p := range sim.Policies {
		s := series{name: p}
		for _, kind := range kinds {
			v := 0.0
			if res := rec.Workloads[kind].Policies[p]; res != nil {
				v = res.TokenHitRate
			}
			s.ys = append(s.ys, v)
		}
		hits = append(hits, s)
	}
	return barPlot(filepath.Join(dir, "hit_rate.png"), "token cache hit rate per policy (standard point)",
		"cached prompt tokens / prompt tokens", kinds, hits)
}

// plotWorkloads draws the TTFT CDF and load-share plots of some workloads.
func plotWorkloads(dir string, rec *StandardRecord, kinds []string) error {
	for _, kind := range kinds {
		wr := rec.Workloads[kind]
		var ss []series
		for _, p := range sim.Policies {
			res := wr.Policies[p]
			if res == nil || len(res.TTFT.Quantiles) == 0 {
				continue
			}
			s := series{name: p}
			for q, v := range res.TTFT.Quantiles {
				s.xs = append(s.xs, max(v, 0.1))
				s.ys = append(s.ys, float64(q)/100)
			}
			ss = append(ss, s)
		}
		if err := linePlotL(filepath.Join(dir, "ttft_cdf_"+kind+".png"),
			fmt.Sprintf("TTFT CDF, %s (%d replicas, %d KV blocks each)", kind, rec.Standard.Replicas, rec.Standard.KVBlocks),
			"time to first token (ms, log)", "fraction of requests", true, true, ss); err != nil {
			return err
		}
		// Load share: one group per policy, one bar per replica.
		var shares []series
		for r := 0; r < rec.Standard.Replicas; r++ {
			s := series{name: fmt.Sprintf("replica %d", r)}
			for _, p := range sim.Policies {
				v := 0.0
				if res := wr.Policies[p]; res != nil && r < len(res.LoadShare) {
					v = res.LoadShare[r]
				}
				s.ys = append(s.ys, v)
			}
			shares = append(shares, s)
		}
		if err := barPlot(filepath.Join(dir, "load_share_"+kind+".png"),
			"requests per replica, "+kind, "share of requests", sim.Policies, shares); err != nil {
			return err
		}
	}
	return nil
}

func sortedKinds(m map[string]*WorkloadRecord) []string {
	var ks []string
	for _, k := range workload.Kinds {
		if _, ok := m[k]; ok {
			ks = append(ks, k)
		}
	}
	return ks
}

// PlotSweep draws, per workload, the hit rate and TTFT p50/p99 against the
// sweep's knob, one line per policy.
func PlotSweep(dir string, rec *SweepRecord) error {
	by := map[string]map[string]*series{}
	var kinds []string
	for _, pt := range rec.Points {
		if pt.Seed != 0 && pt.Seed != rec.Seed {
			continue // plots show the record's own seed; the tables show every seed
		}
		kind := pt.Workload
		if pt.Routers > 1 && rec.Knob != "routers" {
			kind = fmt.Sprintf("%s_r%d", pt.Workload, pt.Routers)
		}
		if by[kind] == nil {
			by[kind] = map[string]*series{}
			kinds = append(kinds, kind)
		}
		for _, m := range []string{"hit", "p50", "p99"} {
			key := m + " " + pt.Policy
			s := by[kind][key]
			if s == nil {
				s = &series{name: pt.Policy}
				by[kind][key] = s
			}
			s.xs = append(s.xs, pt.Value)
			switch m {
			case "hit":
				s.ys = append(s.ys, pt.TokenHitRate)
			case "p50":
				s.ys = append(s.ys, pt.TTFTP50Ms)
			case "p99":
				s.ys = append(s.ys, pt.TTFTP99Ms)
			}
		}
	}
	logX := rec.Knob != "util_of_cold_capacity" && rec.Knob != "unique_share"
	for _, kind := range kinds {
		for _, m := range []struct{ key, label string }{{"hit", "token hit rate"}, {"p50", "TTFT p50 (ms)"}, {"p99", "TTFT p99 (ms)"}} {
			var ss []series
			for _, p := range sim.Policies {
				if s := by[kind][m.key+" "+p]; s != nil {
					ss = append(ss, *s)
				}
			}
			path := filepath.Join(dir, fmt.Sprintf("%s_%s_%s.png", rec.Experiment, m.key, kind))
			bottom := m.key == "hit" && rec.Knob != "util_of_cold_capacity"
			if err := linePlotL(path, fmt.Sprintf("%s: %s, %s", rec.Experiment, m.label, kind), rec.Knob, m.label, logX, bottom, ss); err != nil {
				return err
			}
		}
	}
	return nil
}

// PlotResidency draws precision, recall and hit rate per mode against each
// scenario's knob for prefix_load.
func PlotResidency(dir string, rec *ResidencyRecord) error {
	type key struct{ scn, kind string }
	groups := map[key][]ResidencyRow{}
	var order []key
	for _, r := range rec.Rows {
		if r.Policy != "prefix_load" {
			continue
		}
		k := key{r.Scenario, r.Workload}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	for _, k := range order {
		rows := groups[k]
		metrics := []struct{ key, label string }{{"precision", "precision (tokens)"}, {"recall", "recall (tokens)"}, {"hit", "token hit rate"}}
		if k.scn == "agreement" {
			metrics = append(metrics, struct{ key, label string }{"agreement", "routers agreeing on a new prefix"})
		}
		for _, m := range metrics {
			bym := map[string]*series{}
			var names []string
			for _, r := range rows {
				s := bym[r.Mode]
				if s == nil {
					s = &series{name: r.Mode}
					bym[r.Mode] = s
					names = append(names, r.Mode)
				}
				s.xs = append(s.xs, r.Value)
				switch m.key {
				case "precision":
					s.ys = append(s.ys, r.Precision)
				case "recall":
					s.ys = append(s.ys, r.Recall)
				case "agreement":
					s.ys = append(s.ys, r.ColdAgreement)
				default:
					s.ys = append(s.ys, r.TokenHitRate)
				}
			}
			var ss []series
			for _, n := range names {
				s := *bym[n]
				sortXY(&s)
				ss = append(ss, s)
			}
			logX := k.scn == "kv" || k.scn == "prefixes" || k.scn == "blocks" || k.scn == "routers" || k.scn == "agreement"
			path := filepath.Join(dir, fmt.Sprintf("residency_%s_%s_%s.png", k.scn, m.key, k.kind))
			if err := linePlotL(path, fmt.Sprintf("residency hint, %s: %s (%s, prefix_load)", k.scn, m.label, k.kind),
				rows[0].Knob, m.label, logX, true, ss); err != nil {
				return err
			}
		}
	}
	return nil
}

func sortXY(s *series) {
	idx := make([]int, len(s.xs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return s.xs[idx[a]] < s.xs[idx[b]] })
	xs, ys := make([]float64, len(idx)), make([]float64, len(idx))
	for i, j := range idx {
		xs[i], ys[i] = s.xs[j], s.ys[j]
	}
	s.xs, s.ys = xs, ys
}

// ticks125 labels a log axis at 1, 2 and 5 times each power of ten.
func ticks125(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	if lo <= 0 {
		lo = 1e-3
	}
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi*10; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
	}
	return ts
}
