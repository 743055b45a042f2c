package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// plotAll writes the plots: TTFT p50/p99 per policy for each workload,
// cached_token_rate per policy and workload, and the TTFT distribution of
// the shared-prefix workload.
func plotAll(out Output, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pols := out.Config.Policies
	for _, wl := range out.Config.Workloads {
		res := out.Workloads[wl]
		if res == nil {
			continue
		}
		var p50, p99 plotter.Values
		for _, pol := range pols {
			r := res[pol]
			if r == nil {
				p50, p99 = append(p50, 0), append(p99, 0)
				continue
			}
			p50, p99 = append(p50, r.TTFTP50), append(p99, r.TTFTP99)
		}
		err := bars(filepath.Join(dir, "ttft_"+wl+".png"),
			fmt.Sprintf("TTFT by policy, %s (2 llama.cpp replicas, CPU)", wl), "TTFT (ms)", pols,
			[]string{"p50", "p99"}, []plotter.Values{p50, p99})
		if err != nil {
			return err
		}
	}
	var names []string
	var rates []plotter.Values
	for _, wl := range out.Config.Workloads {
		res := out.Workloads[wl]
		if res == nil {
			continue
		}
		var v plotter.Values
		for _, pol := range pols {
			if r := res[pol]; r != nil {
				v = append(v, r.CachedTokenRate)
			} else {
				v = append(v, 0)
			}
		}
		names, rates = append(names, wl), append(rates, v)
	}
	if len(rates) > 0 {
		if err := bars(filepath.Join(dir, "cached_token_rate.png"),
			"Engine-reported cached tokens / prompt tokens", "cached_token_rate", pols, names, rates); err != nil {
			return err
		}
	}
	if res := out.Workloads["shared_prefix"]; res != nil {
		if err := cdf(filepath.Join(dir, "ttft_cdf_shared_prefix.png"), "TTFT distribution, shared_prefix", pols, res); err != nil {
			return err
		}
	}
	return nil
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
		b.Color = palette[i%len(palette)]
		b.Offset = w * vg.Length(float64(i)-float64(len(vals)-1)/2)
		p.Add(b)
		p.Legend.Add(series[i], b)
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.NominalX(cats...)
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}

func cdf(path, title string, pols []string, res map[string]*PolicyResult) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "TTFT (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	for i, pol := range pols {
		r := res[pol]
		if r == nil || len(r.TTFTsMs) == 0 {
			continue
		}
		pts := make(plotter.XYs, 0, len(r.TTFTsMs))
		for j, t := range r.TTFTsMs {
			pts = append(pts, plotter.XY{X: max(t, 1), Y: float64(j+1) / float64(len(r.TTFTsMs))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		l.StepStyle = plotter.PostStep
		p.Add(l)
		p.Legend.Add(pol, l)
	}
	// The upper left of a CDF is empty: the curves reach 1 on the right.
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = -vg.Points(4)
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
