package docgen

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/llmroute/caddy-llmroute/lab/experiments/e2e"
	"github.com/llmroute/caddy-llmroute/lab/experiments/suite"
	"github.com/llmroute/caddy-llmroute/lab/experiments/tenancy"
)

// Records reads the records of a results directory, each once, when a
// section first needs it. The records it returns are its own: a change
// to one (a test's) shows in every section rendered after it.
type Records struct {
	dir   string
	cache map[string]any
}

// Open returns the records of the results directory dir.
func Open(dir string) *Records {
	return &Records{dir: dir, cache: map[string]any{}}
}

// load reads <dir>/<name>.json into a T, once.
func load[T any](r *Records, name string) (*T, error) {
	if v, ok := r.cache[name]; ok {
		t, ok := v.(*T)
		if !ok {
			return nil, fmt.Errorf("record %s read as %T, asked for as %T", name, v, t)
		}
		return t, nil
	}
	b, err := os.ReadFile(filepath.Join(r.dir, name+".json"))
	if err != nil {
		return nil, err
	}
	t := new(T)
	if err := json.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("record %s: %w", name, err)
	}
	r.cache[name] = t
	return t, nil
}

// Standard is standard.json.
func (r *Records) Standard() (*suite.StandardRecord, error) {
	return load[suite.StandardRecord](r, "standard")
}

// Sweep is a sweep record: kv_sweep, load_sweep, scale, routers or
// mixed_sweep.
func (r *Records) Sweep(name string) (*suite.SweepRecord, error) {
	return load[suite.SweepRecord](r, name)
}

// Variants is variants.json.
func (r *Records) Variants() (*suite.VariantsRecord, error) {
	return load[suite.VariantsRecord](r, "variants")
}

// Residency is residency.json.
func (r *Records) Residency() (*suite.ResidencyRecord, error) {
	return load[suite.ResidencyRecord](r, "residency")
}

// E2E is an end-to-end record: e2e, e2e_goals, e2e_unique_run and the
// others e2e.Write wrote.
func (r *Records) E2E(name string) (*e2e.Record, error) {
	return load[e2e.Record](r, name)
}

// Seeds is e2e_seeds.json.
func (r *Records) Seeds() (*e2e.SeedsRecord, error) {
	return load[e2e.SeedsRecord](r, "e2e_seeds")
}

// Trace is trace.json.
func (r *Records) Trace() (*suite.TraceRecord, error) {
	return load[suite.TraceRecord](r, "trace")
}

// Tenancy is tenancy.json (lab/cmd/llmtenancy).
func (r *Records) Tenancy() (*tenancy.Record, error) {
	return load[tenancy.Record](r, "tenancy")
}
