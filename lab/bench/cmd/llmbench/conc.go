package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/sse"
	"github.com/llmroute/caddy-llmroute/internal/testrig/procstat"
)

// concResult is the concurrency test of one proxy: streams slow SSE
// answers held open at once through it.
type concResult struct {
	Target         string  `json:"target"`
	Streams        int     `json:"streams"`
	OK             int     `json:"ok"`
	Errors         int     `json:"errors"`
	FirstErr       string  `json:"first_error,omitempty"`
	AllOpenSeconds float64 `json:"all_open_after_s"` // time until every stream had its first byte
	OpenAtOnce     int     `json:"open_at_once"`     // streams open during the hold
	HeldSeconds    float64 `json:"test_seconds"`     // first stream opened to last closed
	BaselineRSSMiB float64 `json:"baseline_rss_mib"` // VmRSS after warm-up, before the streams
	PlateauRSSMiB  float64 `json:"plateau_rss_mib"`  // median VmRSS while every stream was open
	PeakRSSMiB     float64 `json:"peak_rss_mib"`     // VmHWM over the test
	KiBPerStream   float64 `json:"kib_per_stream"`   // (plateau - baseline) / streams open
	PeakKiBPerStr  float64 `json:"peak_kib_per_stream"`
	// Live Go heap + goroutine stacks after a forced GC, held minus
	// baseline, per stream: the same quantity without GC timing noise.
	LiveKiBPerStream float64 `json:"live_kib_per_stream"`
	GoBaseline       goMem   `json:"go_baseline"`
	GoHeld           goMem   `json:"go_held"`
	CPUSeconds       float64 `json:"cpu_seconds"`
	Samples          int     `json:"plateau_samples"`
	// llmroute only: /llm_route/state after the last stream ended.
	// /llm_route/state at the end of the hold and after the last stream.
	StateHeld     json.RawMessage `json:"llm_state_held,omitempty"`
	StateAfter    json.RawMessage `json:"llm_state_after,omitempty"`
	InFlightAfter *int            `json:"total_in_flight_after,omitempty"`
	QueuedAfter   *int            `json:"queued_after,omitempty"`
	Released      *bool           `json:"all_released,omitempty"`
}

// streamOne sends one slow streaming request and reads it to the end;
// opened is called at the first event (the first line the upstream sends). The stream must end with [DONE] and
// must not carry a usage chunk (the client did not ask for one; llmroute's
// request_usage must strip the one it asked for).
func streamOne(ctx context.Context, cl *http.Client, url string, body []byte, hdr string, opened func()) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Bench-Slow", hdr)
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	sr := sse.NewReader(resp.Body)
	events, done := 0, false
	for {
		data, err := sr.Next()
		if err != nil {
			break
		}
		if events++; events == 1 {
			opened()
		}
		if sse.IsDone(data) {
			done = true
		}
		if bytes.Contains(data, []byte(`"usage"`)) {
			return fmt.Errorf("a usage chunk reached the client")
		}
	}
	if !done {
		return fmt.Errorf("stream ended without [DONE] after %d events", events)
	}
	return nil
}

// goMem is what the Go runtime of a Caddy process says of its memory
// right after a forced GC (/debug/pprof/heap?gc=1&debug=1).
type goMem struct {
	HeapAllocMiB  float64 `json:"heap_alloc_mib"`
	StackInuseMiB float64 `json:"stack_inuse_mib"`
}

func readGoMem(admin string) (goMem, error) {
	b, err := httpGet("http://"+admin+"/debug/pprof/heap?gc=1&debug=1", 30*time.Second)
	if err != nil {
		return goMem{}, err
	}
	var m goMem
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
		if !ok {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			continue
		}
		switch k {
		case "HeapAlloc":
			m.HeapAllocMiB = n / (1 << 20)
		case "StackInuse":
			m.StackInuseMiB = n / (1 << 20)
		}
	}
	return m, nil
}

// concurrencyTest opens n slow streams through t (a fresh process), holds
// them all open for hold while it samples the proxy's RSS, reads the live
// Go heap and stacks after a forced GC, then has the upstream end every
// stream and checks that each ended cleanly (and, for llmroute, that every
// reservation was released).
func concurrencyTest(env *benchEnv, t *target, n, prompt int, interval, hold time.Duration, ramp time.Duration) concResult {
	res := concResult{Target: t.name, Streams: n}
	pid := t.pid()
	w := makeWorkload(prompt, true, "chat")
	cl := newClient(n + 64)
	defer cl.CloseIdleConnections()
	// Warm up: connections, the index, the heap.
	closedLoop(cl, t.url, w, 32, 500*time.Millisecond, 0)
	cl.CloseIdleConnections()
	time.Sleep(300 * time.Millisecond)
	baseMem, err := readGoMem(t.admin)
	if err != nil {
		res.FirstErr = "reading the Go heap: " + err.Error()
	}
	time.Sleep(300 * time.Millisecond)
	base, _ := procstat.StatusKB(pid, "VmRSS")
	resetHWM(pid)
	cpu0, _ := procCPU(pid)

	hdr := interval.String() + ",100000"
	var opened, finished, errs atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithTimeout(context.Background(), ramp+hold+120*time.Second)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	gap := ramp / time.Duration(n)
	for i := range n {
		if gap > 0 {
			if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
				time.Sleep(d)
			}
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := streamOne(ctx, cl, t.url, w.bodies[i%len(w.bodies)], hdr, func() { opened.Add(1) })
			finished.Add(1)
			if err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}(i)
	}
	// Wait for every stream's first byte (bounded).
	openDeadline := time.Now().Add(60 * time.Second)
	for opened.Load() < int64(n) && finished.Load() == 0 && time.Now().Before(openDeadline) {
		time.Sleep(20 * time.Millisecond)
	}
	res.AllOpenSeconds = time.Since(start).Seconds()
	res.OpenAtOnce = int(opened.Load() - finished.Load())
	// Hold: sample RSS.
	var plateau []int64
	holdEnd := time.Now().Add(hold)
	for time.Now().Before(holdEnd) {
		if rss, err := procstat.StatusKB(pid, "VmRSS"); err == nil {
			plateau = append(plateau, rss)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if isLLM(t.name) {
		res.StateHeld, _ = httpGet("http://"+t.admin+stateapi.Path, 5*time.Second)
	}
	liveMem, err := readGoMem(t.admin)
	if err != nil && res.FirstErr == "" {
		res.FirstErr = "reading the Go heap: " + err.Error()
	}
	// End every stream.
	if _, err := httpPost("http://"+env.upstreams[0]+"/_bench/release", 5*time.Second); err != nil && res.FirstErr == "" {
		res.FirstErr = "releasing the streams: " + err.Error()
	}
	wg.Wait()
	res.HeldSeconds = time.Since(start).Seconds()
	cpu1, _ := procCPU(pid)
	peak, _ := procstat.StatusKB(pid, "VmHWM")

	res.Errors = int(errs.Load())
	res.OK = n - res.Errors
	if v, ok := firstErr.Load().(string); ok && res.FirstErr == "" {
		res.FirstErr = v
	}
	res.CPUSeconds = cpu1 - cpu0
	sort.Slice(plateau, func(i, j int) bool { return plateau[i] < plateau[j] })
	res.Samples = len(plateau)
	res.BaselineRSSMiB = float64(base) / 1024
	res.PeakRSSMiB = float64(peak) / 1024
	open := float64(max(res.OpenAtOnce, 1))
	if len(plateau) > 0 {
		med := plateau[len(plateau)/2]
		res.PlateauRSSMiB = float64(med) / 1024
		res.KiBPerStream = float64(med-base) / open
	}
	res.PeakKiBPerStr = float64(peak-base) / open
	res.GoBaseline, res.GoHeld = baseMem, liveMem
	res.LiveKiBPerStream = ((liveMem.HeapAllocMiB + liveMem.StackInuseMiB) - (baseMem.HeapAllocMiB + baseMem.StackInuseMiB)) * 1024 / open
	if t.admin != "" && isLLM(t.name) {
		inf, q, err := waitReleased(t.admin, 10*time.Second)
		if err != nil {
			fmt.Fprintf(os.Stderr, "llm_route/state: %v\n", err)
		}
		rel := err == nil && inf == 0 && q == 0
		res.StateAfter, _ = httpGet("http://"+t.admin+stateapi.Path, 5*time.Second)
		res.InFlightAfter, res.QueuedAfter, res.Released = &inf, &q, &rel
	}
	return res
}
