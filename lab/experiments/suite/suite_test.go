package suite

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/experiments/sim"
	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

// TestSummaryShape runs the standard point at a tiny scale and checks that
// summary.json is exactly {"workloads": {workload: {policy: {5 figures}}}}.
func TestSummaryShape(t *testing.T) {
	o := Options{Quick: true, Out: t.TempDir(), Commit: "test", Seed: 1, Requests: 120}
	rec, err := RunStandard(o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Targets) != 6 {
		t.Fatalf("%d targets checked, want 6", len(rec.Targets))
	}
	if err := WriteStandard(o.Out, rec, nil); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(o.Out, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatal(err)
	}
	if len(top) != 1 || top["workloads"] == nil {
		t.Fatalf("top-level keys %v, want only workloads", keys(top))
	}
	var wls map[string]map[string]map[string]json.RawMessage
	if err := json.Unmarshal(top["workloads"], &wls); err != nil {
		t.Fatal(err)
	}
	wantW := append([]string(nil), workload.Kinds...)
	sort.Strings(wantW)
	if got := keys(wls); !slices.Equal(got, wantW) {
		t.Fatalf("workloads %v, want %v", got, wantW)
	}
	wantP := append([]string(nil), sim.Policies...)
	sort.Strings(wantP)
	wantF := []string{"max_min_load_ratio", "throughput_tok_s", "token_hit_rate", "ttft_p50_ms", "ttft_p99_ms"}
	for w, ps := range wls {
		if got := keys(ps); !slices.Equal(got, wantP) {
			t.Fatalf("%s: policies %v, want %v", w, got, wantP)
		}
		for p, fs := range ps {
			if got := keys(fs); !slices.Equal(got, wantF) {
				t.Fatalf("%s/%s: fields %v, want %v", w, p, got, wantF)
			}
			for f, raw := range fs {
				var x float64
				if err := json.Unmarshal(raw, &x); err != nil {
					t.Fatalf("%s/%s/%s is not a number: %s", w, p, f, raw)
				}
			}
		}
	}
	for _, f := range []string{"standard.json", "summary.md", "plots/hit_rate.png", "plots/ttft_cdf_shared_prefix.png", "plots/load_share_skewed.png"} {
		if st, err := os.Stat(filepath.Join(o.Out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s missing or empty: %v", f, err)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func TestColdCapacity(t *testing.T) {
	ec := EngineConfig(4096)
	// 2,197 prompt tokens at 60us and 256 output tokens at 0.1ms + 10ms/64.
	got := ColdCapacity(ec, 2197, 256, 64)
	if got < 5 || got > 5.2 {
		t.Fatalf("cold capacity %.3f req/s, want about 5.1", got)
	}
}
