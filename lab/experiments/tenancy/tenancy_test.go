package tenancy

import (
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/admission"
)

func noisyConfig(fair bool) Config {
	cfg := base(7, 40*time.Second)
	cfg.Fair = fair
	cfg.Tenants = []Tenant{tenant("noisy", admission.Standard, 1, 32, 0), tenant("quiet", admission.Standard, 1, 1, 0)}
	return cfg
}

// TestRunsAreDeterministic: the same config and seed give the same result.
func TestRunsAreDeterministic(t *testing.T) {
	a, err := Run(noisyConfig(true))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Run(noisyConfig(true))
	for name, x := range a.Tenants {
		if *x != *b.Tenants[name] {
			t.Fatalf("%s: %+v then %+v", name, *x, *b.Tenants[name])
		}
	}
}

// TestFairQueueShieldsTheQuietTenant is the noisy-neighbour experiment in
// short: behind a FIFO the quiet tenant waits with the flood (and is
// refused when the queue is full); behind the fair queue it waits about
// one release and is never refused.
func TestFairQueueShieldsTheQuietTenant(t *testing.T) {
	fifo, err := Run(noisyConfig(false))
	if err != nil {
		t.Fatal(err)
	}
	fair, err := Run(noisyConfig(true))
	if err != nil {
		t.Fatal(err)
	}
	fq, qq := fifo.Tenants["quiet"], fair.Tenants["quiet"]
	t.Logf("quiet TTFT p50/p99: fifo %.0f/%.0f ms (refused %d of %d), fair %.0f/%.0f ms (refused %d of %d)",
		fq.TTFTp50, fq.TTFTp99, fq.Refused, fq.Sent, qq.TTFTp50, qq.TTFTp99, qq.Refused, qq.Sent)
	if fq.TTFTp50 < 5000 {
		t.Errorf("fifo: the quiet tenant should wait behind the flood, p50 %.0f ms", fq.TTFTp50)
	}
	if qq.TTFTp50 > 500 || qq.TTFTp99 > 2000 || qq.Refused != 0 {
		t.Errorf("fair: quiet p50 %.0f ms, p99 %.0f ms, %d refused", qq.TTFTp50, qq.TTFTp99, qq.Refused)
	}
	if fair.Tenants["noisy"].Completed < fifo.Tenants["noisy"].Completed*9/10 {
		t.Errorf("fair queueing must not waste capacity: noisy completed %d against %d", fair.Tenants["noisy"].Completed, fifo.Tenants["noisy"].Completed)
	}
}

// TestWeightedShares: three backlogged tenants get their weights' shares
// of the tokens.
func TestWeightedShares(t *testing.T) {
	cfg := base(3, 40*time.Second)
	cfg.Fair = true
	cfg.Tenants = []Tenant{tenant("w3", admission.Standard, 3, 16, 0), tenant("w1", admission.Standard, 1, 16, 0)}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s := res.Tenants["w3"].TokenShare; s < 0.72 || s > 0.78 {
		t.Errorf("weight 3 of 4: share %.3f", s)
	}
}

// TestBandsKeepCriticalGoodput: under a sheddable flood, critical traffic
// keeps its goodput behind the bands and loses it behind a FIFO.
func TestBandsKeepCriticalGoodput(t *testing.T) {
	run := func(fair bool, shed float64) float64 {
		cfg := base(5, 40*time.Second)
		cfg.Fair = fair
		cfg.Tenants = []Tenant{tenant("critical", admission.Critical, 1, 8, time.Second), tenant("batch", admission.Sheddable, 1, shed, 0)}
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res.Tenants["critical"].Goodput
	}
	alone, bands, fifo := run(true, 0), run(true, 32), run(false, 32)
	t.Logf("critical goodput: alone %.2f, with a sheddable flood behind bands %.2f, behind a FIFO %.2f req/s", alone, bands, fifo)
	if bands < 0.85*alone {
		t.Errorf("bands: %.2f of %.2f", bands, alone)
	}
	if fifo > 0.3*alone {
		t.Errorf("fifo should collapse: %.2f of %.2f", fifo, alone)
	}
}
