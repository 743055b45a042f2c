package suite

import (
	"errors"
	"os"
	"path/filepath"
)

// WriteSweep writes <experiment>.json and its plots under dir.
func WriteSweep(dir string, rec *SweepRecord) error {
	if err := writeJSON(filepath.Join(dir, rec.Experiment+".json"), rec); err != nil {
		return err
	}
	return PlotSweep(filepath.Join(dir, "plots"), rec)
}

// WriteResidency writes residency.json, residency.md and its plots.
func WriteResidency(dir string, rec *ResidencyRecord) error {
	if err := writeJSON(filepath.Join(dir, "residency.json"), rec); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "residency.md"), []byte(ResidencyMarkdown(rec))); err != nil {
		return err
	}
	return PlotResidency(filepath.Join(dir, "plots"), rec)
}

// All runs every simulator experiment and writes every record, the
// summary and the plots under o.Out. All simulations share one pool, so
// both cores stay busy from the first run to the last.
func All(o Options) error {
	o.defaults()
	r := newRunner(&o)
	std, err := planStandard(&o, r, nil)
	if err != nil {
		return err
	}
	kv, err := planKVSweep(&o, r)
	if err != nil {
		return err
	}
	ld, err := planLoadSweep(&o, r)
	if err != nil {
		return err
	}
	sc, err := planScale(&o, r)
	if err != nil {
		return err
	}
	res, err := planResidency(&o, r)
	if err != nil {
		return err
	}
	vr, err := planVariants(&o, r)
	if err != nil {
		return err
	}
	rt, err := planRouters(&o, r)
	if err != nil {
		return err
	}
	mx, err := planMixedSweep(&o, r)
	if err != nil {
		return err
	}
	var tasks []*task
	for _, ts := range [][]*task{std.tasks, kv.tasks, ld.tasks, sc.tasks, res.tasks, vr.tasks, rt.tasks, mx.tasks} {
		tasks = append(tasks, ts...)
	}
	if err := r.run(tasks); err != nil {
		return err
	}
	for _, c := range []func() error{std.collect, kv.collect, ld.collect, sc.collect, res.collect, vr.collect, rt.collect, mx.collect} {
		if err := c(); err != nil {
			return err
		}
	}
	if err := WriteStandard(o.Out, std.rec, kv.rec); err != nil {
		return err
	}
	for _, s := range []*SweepRecord{kv.rec, ld.rec, sc.rec} {
		if err := WriteSweep(o.Out, s); err != nil {
			return err
		}
	}
	if err := WriteResidency(o.Out, res.rec); err != nil {
		return err
	}
	if err := WriteVariants(o.Out, vr.rec); err != nil {
		return err
	}
	for _, s := range []*SweepRecord{rt.rec, mx.rec} {
		if err := WriteRouters(o.Out, s); err != nil {
			return err
		}
	}
	if err := WriteGoals(o.Out, std.rec, rt.rec); err != nil {
		return err
	}
	r.note("wrote standard.json, summary.json, summary.md, kv_sweep.json, load_sweep.json, scale.json, residency.json, residency.md, "+
		"variants.json, variants.md, routers.json, routers.md, mixed_sweep.json, mixed_sweep.md, goals.json, goals.md and plots under %s", o.Out)
	return nil
}

// Sweeps runs the KV sweep, the load sweep and the scale run and writes
// them.
func Sweeps(o Options) error {
	o.defaults()
	r := newRunner(&o)
	var plans []*plan[*SweepRecord]
	for _, mk := range []func(*Options, *runner) (*plan[*SweepRecord], error){planKVSweep, planLoadSweep, planScale} {
		p, err := mk(&o, r)
		if err != nil {
			return err
		}
		plans = append(plans, p)
	}
	var tasks []*task
	for _, p := range plans {
		tasks = append(tasks, p.tasks...)
	}
	if err := r.run(tasks); err != nil {
		return err
	}
	for _, p := range plans {
		if err := p.collect(); err != nil {
			return err
		}
		if err := WriteSweep(o.Out, p.rec); err != nil {
			return err
		}
	}
	return nil
}

// Replot redraws every plot, summary.md, goals.md and variants.md from the
// records in dir.
func Replot(dir string) error {
	var std StandardRecord
	if err := readJSON(filepath.Join(dir, "standard.json"), &std); err != nil {
		return err
	}
	var kv *SweepRecord
	for _, name := range []string{"kv_sweep", "load_sweep", "scale", "routers", "mixed_sweep"} {
		var s SweepRecord
		err := readJSON(filepath.Join(dir, name+".json"), &s)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if name == "kv_sweep" {
			kv = &s
		}
		if name == "routers" {
			if err := WriteGoals(dir, &std, &s); err != nil {
				return err
			}
		}
		if name == "routers" || name == "mixed_sweep" {
			if err := writeFile(filepath.Join(dir, name+".md"), []byte(RoutersMarkdown(&s))); err != nil {
				return err
			}
		}
		if err := PlotSweep(filepath.Join(dir, "plots"), &s); err != nil {
			return err
		}
	}
	if err := writeFile(filepath.Join(dir, "summary.md"), []byte(SummaryMarkdown(&std, kv))); err != nil {
		return err
	}
	if err := PlotStandard(filepath.Join(dir, "plots"), &std); err != nil {
		return err
	}
	var vr VariantsRecord
	if err := readJSON(filepath.Join(dir, "variants.json"), &vr); err == nil {
		if err := writeFile(filepath.Join(dir, "variants.md"), []byte(VariantsMarkdown(&vr))); err != nil {
			return err
		}
	}
	var res ResidencyRecord
	if err := readJSON(filepath.Join(dir, "residency.json"), &res); err == nil {
		return PlotResidency(filepath.Join(dir, "plots"), &res)
	}
	return nil
}
