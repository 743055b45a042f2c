package docgen

import (
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/experiments/tenancy"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

// The committed docs and records, from this package's directory.
const (
	docsDir    = "../../../docs"
	resultsDir = "../results"
)

func committedDocs(t *testing.T) []string {
	t.Helper()
	paths, err := Docs(docsDir)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// TestDocsMatchRecords renders every marked section of the docs from the
// committed records: a record regenerated without `llmexp docs` fails
// here, naming the section.
func TestDocsMatchRecords(t *testing.T) {
	ms, n, err := Check(committedDocs(t), Open(resultsDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		t.Error(m.String())
	}
	if n == 0 {
		t.Fatal("no generated sections in the docs: the markers are gone, or Parse no longer finds them")
	}
	t.Logf("%d generated sections checked, %d differ", n, len(ms))
}

// TestEverySectionRenders renders every known section from the committed
// records, used in a doc or not.
func TestEverySectionRenders(t *testing.T) {
	recs := Open(resultsDir)
	for _, name := range Names() {
		s, err := Render(name, recs)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !strings.Contains(s, "\n|---") {
			t.Errorf("%s renders no table:\n%s", name, s)
		}
	}
}

// TestChangedRecordMismatches changes one figure of a record in memory
// and checks that the section that shows it no longer matches the docs.
func TestChangedRecordMismatches(t *testing.T) {
	cases := []struct {
		name   string
		change func(t *testing.T, r *Records)
		want   string // a section that must differ
	}{
		{"standard point hit rate", func(t *testing.T, r *Records) {
			std, err := r.Standard()
			if err != nil {
				t.Fatal(err)
			}
			std.Workloads[workload.SharedPrefix].Policies["prefix_load"].TokenHitRate += 0.01
		}, "standard/shared_prefix"},
		{"target value", func(t *testing.T, r *Records) {
			std, err := r.Standard()
			if err != nil {
				t.Fatal(err)
			}
			std.Targets[0].Detail += " (changed)"
		}, "standard/targets"},
		{"residency precision", func(t *testing.T, r *Records) {
			res, err := r.Residency()
			if err != nil {
				t.Fatal(err)
			}
			res.Rows[0].Precision -= 0.1
		}, "residency/kv"},
		{"variant tail", func(t *testing.T, r *Records) {
			vr, err := r.Variants()
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range vr.Points {
				if p.Policy == "prefix_load" && p.Workload == workload.NoSharedPrefix && p.Routers == 8 {
					vr.Points[i].TTFTP99Ms *= 2
				}
			}
		}, "variants/ratios"},
		{"end-to-end p99", func(t *testing.T, r *Records) {
			rec, err := r.E2E("e2e")
			if err != nil {
				t.Fatal(err)
			}
			rec.Runs[0].Result.TTFT.P99 += 10
		}, "e2e/compare"},
		{"per-seed p99", func(t *testing.T, r *Records) {
			rec, err := r.Seeds()
			if err != nil {
				t.Fatal(err)
			}
			rec.Cells[0].Points[0].TTFTP99Ms += 10
		}, "e2e_seeds/table"},
		{"tenancy quiet TTFT", func(t *testing.T, r *Records) {
			rec, err := r.Tenancy()
			if err != nil {
				t.Fatal(err)
			}
			for i, row := range rec.Noisy {
				if row.Mode == tenancy.NoisyFair && row.Tenant == "quiet" {
					rec.Noisy[i].TTFTp50 += 100
				}
			}
		}, "tenancy/noisy"},
		{"tenancy critical goodput", func(t *testing.T, r *Records) {
			rec, err := r.Tenancy()
			if err != nil {
				t.Fatal(err)
			}
			for i, row := range rec.Goodput {
				if row.Mode == tenancy.ModeBandsCap && row.SheddableRate == 32 {
					rec.Goodput[i].Goodput -= 0.5
				}
			}
		}, "tenancy/goodput"},
	}
	paths := committedDocs(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			recs := Open(resultsDir)
			c.change(t, recs)
			ms, _, err := Check(paths, recs)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				if m.Name == c.want {
					if !strings.Contains(m.String(), c.want) {
						t.Errorf("mismatch message does not name the section: %s", m)
					}
					return
				}
			}
			t.Errorf("changed record: no mismatch in section %s (mismatches: %v)", c.want, ms)
		})
	}
}
