package tenancy

import (
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Plot draws the experiments' plots into dir: tenancy_ttft.png (TTFT p50
// and p99 per tenant, FIFO against the fair queue) and tenancy_goodput.png
// (critical goodput against sheddable load, per queue).
func Plot(dir string, rec *Record) error {
	if err := plotTTFT(filepath.Join(dir, "tenancy_ttft.png"), rec); err != nil {
		return err
	}
	return plotGoodput(filepath.Join(dir, "tenancy_goodput.png"), rec)
}

func plotTTFT(path string, rec *Record) error {
	p := plot.New()
	p.Title.Text = "Noisy neighbour: time to first token per tenant"
	p.Y.Label.Text = "TTFT (log scale)"
	// Bars start at zero, which a log axis cannot show: the bars are
	// log10(ms) on a linear axis, labelled in time.
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 1, Label: "10 ms"}, {Value: 2, Label: "100 ms"},
		{Value: 3, Label: "1 s"}, {Value: 4, Label: "10 s"}, {Value: 5, Label: "100 s"}})
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	var labels []string
	var p50, p99 plotter.Values
	for _, r := range rec.Noisy {
		labels = append(labels, r.Mode+": "+r.Tenant)
		p50 = append(p50, math.Log10(max(r.TTFTp50, 1)))
		p99 = append(p99, math.Log10(max(r.TTFTp99, 1)))
	}
	w := vg.Points(28)
	for i, s := range []struct {
		name string
		v    plotter.Values
	}{{"p50", p50}, {"p99", p99}} {
		b, err := plotter.NewBarChart(s.v, w)
		if err != nil {
			return err
		}
		b.LineStyle.Width = 0
		b.Color = plotutil.Color(i)
		b.Offset = w * vg.Length(float64(i)-0.5)
		p.Add(b)
		p.Legend.Add(s.name, b)
	}
	p.NominalX(labels...)
	p.Y.Min, p.Y.Max = 0, 5.5
	return p.Save(8*vg.Inch, 4.5*vg.Inch, path)
}

func plotGoodput(path string, rec *Record) error {
	p := plot.New()
	p.Title.Text = "Critical goodput (TTFT <= 1 s) under sheddable load"
	p.X.Label.Text = "sheddable offered load (req/s; the pool completes ~11)"
	p.Y.Label.Text = "critical goodput (req/s; offered 8)"
	p.Legend.Top = true
	p.Legend.Left = false
	p.Add(plotter.NewGrid())
	for i, mode := range []string{ModeFIFO, ModeBands, ModeBandsCap} {
		var pts plotter.XYs
		for _, r := range rec.Goodput {
			if r.Mode == mode {
				pts = append(pts, plotter.XY{X: r.SheddableRate, Y: r.Goodput})
			}
		}
		l, s, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		l.Width = vg.Points(2)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(mode, l, s)
	}
	p.Y.Min, p.Y.Max = 0, 11 // room above the lines for the legend
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}
