// Package plots draws the real-engine benches' figures, so that realbench
// and serverbench draw them alike.
package plots

import (
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Palette is the benches' series colours, in series order.
var Palette = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
}

// TTFTCDF writes the distribution of each named series of sorted TTFTs in
// milliseconds (series without samples are left out) on a log scale.
func TTFTCDF(path, title string, names []string, sorted map[string][]float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "TTFT (ms, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	for i, name := range names {
		ts := sorted[name]
		if len(ts) == 0 {
			continue
		}
		pts := make(plotter.XYs, 0, len(ts))
		for j, t := range ts {
			pts = append(pts, plotter.XY{X: max(t, 1), Y: float64(j+1) / float64(len(ts))})
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = Palette[i%len(Palette)]
		l.Width = vg.Points(1.5)
		l.StepStyle = plotter.PostStep
		p.Add(l)
		p.Legend.Add(name, l)
	}
	// The upper left of a CDF is empty: the curves reach 1 on the right.
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(8)
	p.Legend.YOffs = -vg.Points(4)
	return p.Save(7*vg.Inch, 4*vg.Inch, path)
}
