package tenancy

import (
	"strings"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/admission"
)

func TestDocTime(t *testing.T) {
	for ms, want := range map[float64]string{0: "0 ms", 224.0062: "224 ms", 999.4: "999 ms", 999.6: "1.0 s", 26259.4: "26.3 s"} {
		if got := docTime(ms); got != want {
			t.Errorf("docTime(%g) = %q, want %q", ms, got, want)
		}
	}
}

// docRecord is a record with one noisy-neighbour mode and one goodput
// cell, as RunAll writes them.
func docRecord() *Record {
	rec := &Record{Configs: map[string]Config{}}
	cfg := base(0, time.Minute)
	cfg.Tenants = []Tenant{tenant("noisy", admission.Standard, 1, 32, 0), tenant("quiet", admission.Standard, 1, 1, 0)}
	rec.Configs[noisyConfigKey(NoisyFair)] = cfg
	rec.Noisy = []NoisyRow{
		{Mode: NoisyFair, Tenant: "noisy", TenantResult: TenantResult{Sent: 90, TTFTp50: 28843.6}},
		{Mode: NoisyFair, Tenant: "quiet", TenantResult: TenantResult{Sent: 9, Refused: 1, TTFTp50: 224.0, TTFTp99: 1663.2}},
	}
	cfg.Tenants = []Tenant{tenant("critical", admission.Critical, 1, 8, time.Second), tenant("batch", admission.Sheddable, 1, 4, 0)}
	rec.Configs[goodputConfigKey(ModeBandsCap, 4)] = cfg
	rec.Goodput = []GoodputRow{{Mode: ModeBandsCap, SheddableRate: 4, Goodput: 7.8333}}
	return rec
}

func TestDocTables(t *testing.T) {
	rec := docRecord()
	got, err := NoisyTable(rec, []ModeRow{{Title: "fair queue", Mode: NoisyFair}})
	if err != nil {
		t.Fatal(err)
	}
	want := "| noisy neighbour (noisy 32 req/s, quiet 1 req/s) | quiet TTFT p50 | quiet TTFT p99 | quiet refused | noisy TTFT p50 |\n" +
		"|---|---:|---:|---:|---:|\n| fair queue | 224 ms | 1.7 s | 1 of 9 | 28.8 s |\n"
	if got != want {
		t.Errorf("noisy table:\n%s\nwant:\n%s", got, want)
	}
	got, err = GoodputTable(rec, []ModeRow{{Title: "bands", Mode: ModeBandsCap}}, []RateColumn{{Title: "sheddable 4 req/s", Rate: 4}})
	if err != nil {
		t.Fatal(err)
	}
	want = "| critical goodput (8 req/s offered, TTFT <= 1 s) | sheddable 4 req/s |\n|---|---:|\n| bands | 7.83 |\n"
	if got != want {
		t.Errorf("goodput table:\n%s\nwant:\n%s", got, want)
	}
}

// TestDocTablesNeedTheirRuns: a row or column the record lacks, or runs
// whose offered loads differ, are errors, not an empty cell or a header
// that names the wrong load.
func TestDocTablesNeedTheirRuns(t *testing.T) {
	rec := docRecord()
	if _, err := NoisyTable(rec, []ModeRow{{Title: "FIFO", Mode: NoisyFIFO}}); err == nil {
		t.Error("noisy table: a missing mode rendered")
	}
	if _, err := GoodputTable(rec, []ModeRow{{Title: "bands", Mode: ModeBandsCap}}, []RateColumn{{Title: "32", Rate: 32}}); err == nil {
		t.Error("goodput table: a missing sheddable load rendered")
	}
	cfg := rec.Configs[noisyConfigKey(NoisyFair)]
	cfg.Tenants = []Tenant{tenant("noisy", admission.Standard, 1, 16, 0), tenant("quiet", admission.Standard, 1, 1, 0)}
	rec.Configs[noisyConfigKey(NoisyFIFO)] = cfg
	rec.Noisy = append(rec.Noisy, NoisyRow{Mode: NoisyFIFO, Tenant: "noisy"}, NoisyRow{Mode: NoisyFIFO, Tenant: "quiet"})
	_, err := NoisyTable(rec, []ModeRow{{Title: "fair", Mode: NoisyFair}, {Title: "FIFO", Mode: NoisyFIFO}})
	if err == nil || !strings.Contains(err.Error(), "other loads") {
		t.Errorf("noisy table over modes run at different loads: %v", err)
	}
}
