package main

import (
	"math"
	"os"
	"path/filepath"
	"testing"
)

// benchReport builds a report of stock Caddy and llm_prefix_load at 4 KiB
// JSON: rounds of slices, llm's CPU per request ratio times Caddy's in
// every slice of the same pass, with jitter.
func benchReport(rounds int, ratio float64, jitter []float64) *report {
	r := &report{Config: runConfig{Sizes: []int{4096}, Targets: []string{"caddy", "llm_prefix_load"}}}
	w := workload{size: 4096}
	for round := 1; round <= rounds; round++ {
		var base, llm []float64
		for s, j := range jitter {
			b := 100 + 10*float64(s) // the machine's speed drifts from pass to pass
			base = append(base, b)
			llm = append(llm, b*ratio*(1+j))
		}
		r.addRound("caddy", w, cellRound{Round: round, RPS: 1000, CPUPer1k: 0.1, SliceCPUUs: base})
		r.addRound("llm_prefix_load", w, cellRound{Round: round, RPS: 900, CPUPer1k: 0.1 * ratio, SliceCPUUs: llm})
	}
	r.finish()
	return r
}

// TestCPUSlicePairs proves that CPU is paired slice by slice within a
// round (the drift between passes cancels), that the interval brackets
// the pairs' median, and that the verdict says when the interval cannot
// confirm it.
func TestCPUSlicePairs(t *testing.T) {
	r := benchReport(3, 1.2, []float64{0, 0.01, -0.01, 0.02, -0.02})
	c := r.index[cellKey("llm_prefix_load", "chat", 4096, false)]
	if c.CPUPairMedian == nil || len(c.CPUPairCI) != 2 {
		t.Fatalf("no slice pairs: %+v", c)
	}
	if c.CPUPairs != 15 {
		t.Errorf("pairs = %d, want 3 rounds of 5", c.CPUPairs)
	}
	if math.Abs(*c.CPUPairMedian-1.2) > 1e-9 {
		t.Errorf("pairs' median %v, want 1.2: the drift between passes cancels in the pairs", *c.CPUPairMedian)
	}
	if ci := c.CPUPairCI; !(ci[0] <= 1.2 && 1.2 <= ci[1]) || ci[1]-ci[0] > 0.06 {
		t.Errorf("interval %v: should bracket 1.2, within 0.06", ci)
	}
	v := r.Targets.CPUBySize[0]
	if v.Met || v.Conclusive == nil || !*v.Conclusive {
		t.Errorf("1.2x with 2%% jitter: not met beyond doubt, got met=%v conclusive=%v", v.Met, v.Conclusive)
	}

	noisy := benchReport(3, 1.12, []float64{0, 0.3, -0.3, 0.25, -0.25})
	if nv := noisy.Targets.CPUBySize[0]; nv.Met || nv.Conclusive == nil || *nv.Conclusive {
		t.Errorf("1.12x with 30%% jitter: not met, inconclusive (interval %v), got met=%v conclusive=%v", nv.WorstPairCI, nv.Met, nv.Conclusive)
	}
	ok := benchReport(3, 1.0, []float64{0, 0.01, -0.01, 0.02, -0.02})
	if v := ok.Targets.CPUBySize[0]; !v.Met || v.Conclusive == nil || !*v.Conclusive {
		t.Errorf("1.0x: met beyond doubt, got met=%v conclusive=%v", v.Met, v.Conclusive)
	}
	if n := len(slicePairs(c, &cell{Rounds: []cellRound{{Round: 9, SliceCPUUs: []float64{1}}}})); n != 0 {
		t.Errorf("a round the baseline lacks paired %d slices", n)
	}
}

// TestCopyFileIsACopy proves that a target's binary is its own file (not
// a link sharing the original's pages) with the same bytes, executable.
func TestCopyFileIsACopy(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	want := []byte("\x7fELF not really, but bytes")
	if err := os.WriteFile(src, want, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || string(got) != string(want) {
		t.Fatalf("copy holds %q (%v), want %q", got, err, want)
	}
	a, _ := os.Stat(src)
	b, _ := os.Stat(dst)
	if os.SameFile(a, b) {
		t.Error("the copy is the same file")
	}
	if b.Mode().Perm()&0o100 == 0 {
		t.Errorf("the copy is not executable: %v", b.Mode())
	}
}

func TestRecordPaths(t *testing.T) {
	root := "/r"
	for _, c := range []struct {
		name    string
		o       options
		out, md string
	}{
		{"default", options{}, "/r/lab/bench/results.json", "/r/lab/bench/results.md"},
		{"quick", options{quick: true}, "/r/lab/bench/results-quick.json", "/r/lab/bench/results-quick.md"},
		{"out", options{out: "/x/a.json"}, "/x/a.json", "/x/a.md"},
		{"out and md", options{out: "/x/a.json", md: "/y/b.md"}, "/x/a.json", "/y/b.md"},
		// A profile or concurrency run must not replace the recorded
		// matrix with an empty one.
		{"skip matrix", options{skipMatrix: true}, "", ""},
		{"skip matrix, quick", options{skipMatrix: true, quick: true}, "", ""},
		{"skip matrix with out", options{skipMatrix: true, out: "/x/c.json"}, "/x/c.json", "/x/c.md"},
	} {
		out, md := recordPaths(root, c.o)
		if out != c.out || md != c.md {
			t.Errorf("%s: %q, %q; want %q, %q", c.name, out, md, c.out, c.md)
		}
	}
}
