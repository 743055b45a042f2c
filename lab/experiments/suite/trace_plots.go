package suite

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotTrace draws, per case of the trace record (its first seed), the
// TTFT CDF of every policy with one router, and the hit rate of every
// policy per router count against the trace's bound.
func PlotTrace(dir string, rec *TraceRecord) error {
	if len(rec.Seeds) == 0 {
		return nil
	}
	seed := rec.Seeds[0]
	for _, c := range rec.Cases {
		var ss []series
		hits := map[int]map[string]float64{}
		for _, p := range tracePolicyOrder {
			for _, pt := range rec.Points {
				if pt.Workload != c.Label() || pt.Seed != seed || pt.Policy != p {
					continue
				}
				if hits[pt.Routers] == nil {
					hits[pt.Routers] = map[string]float64{}
				}
				hits[pt.Routers][p] = pt.TokenHitRate
				if pt.Routers != 1 || len(pt.TTFTQuantiles) == 0 {
					continue
				}
				s := series{name: p}
				for q, v := range pt.TTFTQuantiles {
					s.xs = append(s.xs, max(v, 0.1))
					s.ys = append(s.ys, float64(q)/100)
				}
				ss = append(ss, s)
			}
		}
		if err := linePlotL(filepath.Join(dir, "trace_cdf_"+c.file()+".png"), fmt.Sprintf("TTFT CDF, %s, %s, one router", rec.Trace.Name, c.Label()),
			"time to first token (ms, log)", "fraction of requests", true, true, ss); err != nil {
			return err
		}
		if err := hitBoundPlot(filepath.Join(dir, "trace_hit_"+c.file()+".png"), fmt.Sprintf("token hit rate vs the trace's bound, %s", c.Label()),
			hits, rec.Stats.Bound); err != nil {
			return err
		}
	}
	return nil
}

// hitBoundPlot draws one group of bars per policy (one bar per router
// count) and the bound as a horizontal line.
func hitBoundPlot(path, title string, hits map[int]map[string]float64, bound float64) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "token hit rate"
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	p.Y.Min, p.Y.Max = 0, max(bound, 0.01)*1.5
	var labels []string
	for _, name := range tracePolicyOrder {
		for _, n := range TraceRouterCounts {
			if _, ok := hits[n][name]; ok {
				labels = append(labels, name)
				break
			}
		}
	}
	w := vg.Points(60 / float64(len(TraceRouterCounts)))
	for i, n := range TraceRouterCounts {
		vals := make(plotter.Values, len(labels))
		for j, l := range labels {
			vals[j] = hits[n][l]
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i)
		bars.Offset = w * vg.Length(float64(i)-float64(len(TraceRouterCounts)-1)/2)
		p.Add(bars)
		p.Legend.Add(fmt.Sprintf("%d router(s)", n), bars)
	}
	line := plotter.NewFunction(func(float64) float64 { return bound })
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	line.Width = vg.Points(1.5)
	p.Add(line)
	p.Legend.Add(fmt.Sprintf("bound %.3f", bound), line)
	p.X.Min, p.X.Max = -0.6, float64(len(labels))-0.4
	p.NominalX(labels...)
	p.X.Tick.Label.Rotation = 0.5
	p.X.Tick.Label.XAlign = -0.9
	return save(p, path, 9, 5)
}
