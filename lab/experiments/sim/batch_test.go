package sim

import (
	"reflect"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
)

// TestRunAll runs four simulations two at a time: done sees each index
// once, and each result is the one sim.Run gives alone.
func TestRunAll(t *testing.T) {
	w := sharedPrefix(t, 200, 20)
	cfgs := []Config{config("round_robin", 512), config("prefix_load", 512), config("least_load", 1024), config("prefix_affinity", 512)}
	ws := []*workload.Workload{w, w, w, w}
	got := make([]*Result, len(cfgs))
	calls := 0
	RunAll(cfgs, ws, 2, func(i int, res *Result, err error, d time.Duration) {
		calls++
		if err != nil {
			t.Errorf("%d: %v", i, err)
		}
		if got[i] != nil {
			t.Errorf("%d reported twice", i)
		}
		got[i] = res
	})
	if calls != len(cfgs) {
		t.Fatalf("done called %d times, want %d", calls, len(cfgs))
	}
	for i, c := range cfgs {
		if want := mustRun(t, c, w); !reflect.DeepEqual(got[i], want) {
			t.Errorf("%s: RunAll's result differs from Run's", c.Policy)
		}
	}
}
