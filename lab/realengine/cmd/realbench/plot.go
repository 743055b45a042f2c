package main

import (
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/llmroute/caddy-llmroute/lab/realengine/plots"
)

// plotAll writes the plots: per engine, TTFT p50/p99 per policy for each
// workload, cached_token_rate per policy and workload, and the TTFT
// distribution of shared_prefix; across engines, the router's precision and
// its predicted/reported cached-token ratio per policy and workload.
func plotAll(out Output, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pols := out.Config.Policies
	for _, e := range out.Config.Engines {
		er := out.Engines[e.Name]
		if er == nil {
			continue
		}
		var names []string
		var rates []plotter.Values
		for _, wl := range out.Config.Workloads {
			res := er.Workloads[wl]
			if res == nil {
				continue
			}
			p50, p99, rate := perPolicy(res, pols, func(r *PolicyResult) float64 { return r.TTFTP50 }),
				perPolicy(res, pols, func(r *PolicyResult) float64 { return r.TTFTP99 }),
				perPolicy(res, pols, func(r *PolicyResult) float64 { return r.CachedTokenRate })
			err := bars(filepath.Join(dir, fmt.Sprintf("ttft_%s_%s.png", e.Name, wl)),
				fmt.Sprintf("TTFT by policy, %s, %s engine (2 llama.cpp replicas, CPU)", wl, e.Name), "TTFT (ms)", pols,
				[]string{"p50", "p99"}, []plotter.Values{p50, p99})
			if err != nil {
				return err
			}
			names, rates = append(names, wl), append(rates, rate)
		}
		if len(rates) > 0 {
			if err := bars(filepath.Join(dir, "cached_token_rate_"+e.Name+".png"),
				"Engine-reported cached tokens / prompt tokens, "+e.Name+" engine", "cached_token_rate", pols, names, rates); err != nil {
				return err
			}
		}
		if res := er.Workloads["shared_prefix"]; res != nil {
			if err := cdf(filepath.Join(dir, "ttft_cdf_"+e.Name+"_shared_prefix.png"), "TTFT distribution, shared_prefix, "+e.Name+" engine", pols, res); err != nil {
				return err
			}
		}
	}
	// Across engines: how well the router's beliefs match what each
	// engine reused, on the workloads that share prefixes.
	for _, m := range []struct {
		file, title, label string
		get                func(r *PolicyResult) float64
	}{
		{"precision_by_engine.png", "Router precision (hits / (hits + misses))", "precision",
			func(r *PolicyResult) float64 { return r.Router.Precision }},
		{"predicted_over_reported_by_engine.png", "Predicted / engine-reported cached tokens (1 = exact)", "predicted / reported",
			func(r *PolicyResult) float64 { return r.Router.PredictedOverReported }},
	} {
		var series []string
		var vals []plotter.Values
		for _, e := range out.Config.Engines {
			for _, wl := range []string{"shared_prefix", "multi_turn"} {
				er := out.Engines[e.Name]
				if er == nil || er.Workloads[wl] == nil {
					continue
				}
				series = append(series, e.Name+" "+wl)
				vals = append(vals, perPolicy(er.Workloads[wl], pols, m.get))
			}
		}
		if len(vals) == 0 {
			continue
		}
		if err := bars(filepath.Join(dir, m.file), m.title, m.label, pols, series, vals); err != nil {
			return err
		}
	}
	return nil
}

// perPolicy returns get of each policy's result, 0 where there is none.
func perPolicy(res map[string]*PolicyResult, pols []string, get func(*PolicyResult) float64) plotter.Values {
	var v plotter.Values
	for _, pol := range pols {
		if r := res[pol]; r != nil {
			v = append(v, get(r))
		} else {
			v = append(v, 0)
		}
	}
	return v
}

func bars(path, title, ylabel string, cats, series []string, vals []plotter.Values) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	w := vg.Points(18)
	top := 0.0
	for _, v := range vals {
		for _, x := range v {
			top = max(top, x)
		}
	}
	if top > 0 {
		p.Y.Max = top * 1.3 // room for the legend above the bars
	}
	for i, v := range vals {
		b, err := plotter.NewBarChart(v, w)
		if err != nil {
			return err
		}
		b.LineStyle.Width = 0
		b.Color = plots.Palette[i%len(plots.Palette)]
		b.Offset = w * vg.Length(float64(i)-float64(len(vals)-1)/2)
		p.Add(b)
		p.Legend.Add(series[i], b)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.NominalX(cats...)
	// Room on both sides for the outer bars of a group.
	p.X.Min, p.X.Max = -0.5, float64(len(cats))-0.5
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

func cdf(path, title string, pols []string, res map[string]*PolicyResult) error {
	sorted := map[string][]float64{}
	for _, pol := range pols {
		if r := res[pol]; r != nil {
			sorted[pol] = r.TTFTsMs
		}
	}
	return plots.TTFTCDF(path, title, pols, sorted)
}
