// Package soak drives the caddy binary (with llmroute) against in-process
// fake replicas for a bounded time, at an open-loop rate, with random faults
// from the failure matrix, and checks the invariants that must hold however
// long it runs: no reservation leaks, no request sent again after its first
// byte reached the client, no cut stream shown as complete, no replica above
// its cap, and goroutines and memory back near where they started.
//
// cmd/llmsoak is its command line; the integration tests run it briefly.
package soak

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/openai"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
)

// Fault kinds the soak sends, as named in the result.
const (
	KindOK         = "ok"
	Kind429        = "429"
	Kind503        = "503"
	Kind500        = "500"
	KindStall      = "stall"
	KindCut        = "cut"
	KindSlow       = "slow"
	KindDisconnect = "disconnect"
	// KindPoison is a poisoned input: every replica it reaches answers 500
	// (an input the engine mishandles). It must reach its client as 500
	// without taking replicas out for everyone else.
	KindPoison = "poison"
	// KindForbidden asks for an engine's administrative endpoint
	// (/metrics, /reset_prefix_cache, /sleep, /sim/fault): it must get 404
	// unknown_url and never reach a replica.
	KindForbidden = "forbidden"
	// KindAbsurdUsage is answered in full by a replica whose usage is
	// absurd (total_tokens 2^62, or negative): the client gets its answer
	// and no tenant's accounting takes the absurd count.
	KindAbsurdUsage = "absurd_usage"
)

// absurdCharge is more tokens than a whole soak can use: a tenant charged
// this much (or a virtual time this far) took an absurd usage.
const absurdCharge = 1e12

// DefaultMix is the default weight of each fault kind.
var DefaultMix = map[string]float64{
	KindOK: 60, Kind429: 4, Kind503: 4, Kind500: 2, KindStall: 2, KindCut: 5, KindSlow: 15, KindDisconnect: 8,
	KindPoison: 3, KindForbidden: 2, KindAbsurdUsage: 2,
}

// forbiddenPaths are the endpoints KindForbidden asks for.
var forbiddenPaths = []string{"/metrics", "/reset_prefix_cache", "/sleep", "/sim/fault", "/flush_cache"}

// Config is one soak run.
type Config struct {
	// Caddy is the caddy binary (with llmroute).
	Caddy string
	// Duration is how long requests are started for.
	Duration time.Duration
	// Rate is the open-loop arrival rate, requests per second.
	Rate float64
	// MaxInFlight bounds the client's requests in flight; an arrival that
	// finds it reached is counted as skipped, not sent. Default 256.
	MaxInFlight int
	// Replicas is the number of fake replicas. Default 3.
	Replicas int
	// Cap is max_in_flight per replica. Default 8.
	Cap int
	// QueueSize and QueueTimeout configure the router's queue. Defaults
	// 128 and 3s.
	QueueSize    int
	QueueTimeout time.Duration
	// CooldownBase and CooldownMax are the policy's cooldown. Defaults
	// 100ms and 1s (short, so that the soak sees many cooldowns end).
	CooldownBase, CooldownMax time.Duration
	// Mix weighs the fault kinds (DefaultMix when nil).
	Mix map[string]float64
	// StreamShare is the share of non-fault-specific requests that stream.
	// Default 0.75.
	StreamShare float64
	// Seed makes the request mix reproducible.
	Seed uint64
	// Dir holds caddy's config, data and log; a temporary folder if empty
	// (removed afterwards).
	Dir string
	// Progress receives a line every ProgressEvery (default 5s); nil for
	// none.
	Progress      io.Writer
	ProgressEvery time.Duration
	// MaxGoroutineGrowth is how many more goroutines caddy may have at the
	// end than at the start. Default 40.
	MaxGoroutineGrowth int
	// MaxRSSGrowth is how many bytes of RSS caddy may gain. Default 96 MiB.
	MaxRSSGrowth int64
}

func (c *Config) defaults() {
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 256
	}
	if c.Replicas == 0 {
		c.Replicas = 3
	}
	if c.Cap == 0 {
		c.Cap = 8
	}
	if c.QueueSize == 0 {
		c.QueueSize = 128
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = 3 * time.Second
	}
	if c.CooldownBase == 0 {
		c.CooldownBase = 100 * time.Millisecond
	}
	if c.CooldownMax == 0 {
		c.CooldownMax = max(time.Second, c.CooldownBase)
	}
	if c.Mix == nil {
		c.Mix = DefaultMix
	}
	if c.StreamShare == 0 {
		c.StreamShare = 0.75
	}
	if c.ProgressEvery == 0 {
		c.ProgressEvery = 5 * time.Second
	}
	if c.MaxGoroutineGrowth == 0 {
		c.MaxGoroutineGrowth = 40
	}
	if c.MaxRSSGrowth == 0 {
		c.MaxRSSGrowth = 96 << 20
	}
}

// Sample is caddy's goroutines and memory at one moment.
type Sample struct {
	Goroutines int   `json:"goroutines"`
	RSSBytes   int64 `json:"rss_bytes"`
}

// Result is what a soak run saw.
type Result struct {
	Duration    string  `json:"duration"`
	Rate        float64 `json:"rate"`
	Replicas    int     `json:"replicas"`
	Cap         int     `json:"cap_per_replica"`
	ElapsedSecs float64 `json:"elapsed_seconds"`

	Requests  int `json:"requests"`
	Skipped   int `json:"skipped_client_bound"`
	Successes int `json:"successes"`
	// Errors counts every request that did not succeed, by class.
	Errors map[string]int `json:"errors_by_class"`
	// Faults counts the requests sent per fault kind.
	Faults map[string]int `json:"faults_sent"`
	// UnexpectedFailures counts "ok" and "slow" requests that failed for
	// another reason than a replica cooling or a full queue.
	UnexpectedFailures map[string]int `json:"unexpected_failures,omitempty"`
	// HealthySuccessRate is the share of fault-free ("ok") requests that
	// succeeded: what poisoned traffic must not lower.
	HealthySuccessRate float64 `json:"healthy_success_rate"`
	// ForbiddenPassed counts KindForbidden requests that reached a replica
	// or got anything but 404 unknown_url.
	ForbiddenPassed int `json:"forbidden_passed"`
	// PoisonNot500 counts poisoned requests whose client did not see the
	// engine's 500 (or a refusal while every replica was out).
	PoisonNot500 int `json:"poison_not_500"`
	// AbsurdTenants counts tenants whose accounting (tokens charged or
	// left, virtual time) took an absurd usage (KindAbsurdUsage).
	AbsurdTenants int `json:"absurd_tenants"`

	LeakedReservations     int `json:"leaked_reservations"`
	LeftQueued             int `json:"left_queued"`
	DuplicateSends         int `json:"duplicate_sends"`
	TruncatedShownComplete int `json:"truncated_shown_as_complete"`
	BadErrorBodies         int `json:"bad_error_bodies"`
	// TruncatedRequestBodies counts requests a replica received with a
	// body shorter than its Content-Length (a broken resend).
	TruncatedRequestBodies int            `json:"truncated_request_bodies"`
	CapViolations          int            `json:"cap_violations"`
	MaxConcurrent          map[string]int `json:"max_concurrent_per_replica"`
	// Examples describes up to 10 requests behind each invariant failure.
	Examples []string `json:"examples,omitempty"`

	Start Sample `json:"start"`
	End   Sample `json:"end"`

	// Failures lists the invariants that did not hold; empty means pass.
	Failures []string `json:"failures"`
	Pass     bool     `json:"pass"`
}

// outcome is what the client saw of one soak request.
type outcome struct {
	id        string
	kind      string
	class     string // "ok" or an error class
	firstByte time.Time
	sawDone   bool
	cleanEnd  bool // the body ended without error
	clientCut bool // the client went away on purpose
	badError  bool // an error answer not in OpenAI's shape
}

// Run runs one soak and returns its result. An error means the soak could
// not run (caddy did not start); invariant failures are in the result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if cfg.Rate <= 0 || cfg.Duration <= 0 {
		return nil, errors.New("soak: rate and duration must be positive")
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "llmsoak-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}

	tracker := fakereplica.NewTracker()
	var reps []*fakereplica.Replica
	defer func() {
		for _, r := range reps {
			r.Close()
		}
	}()
	site := caddyproc.SiteConfig{
		Strategy:              "prefix_load",
		MaxInFlight:           cfg.Cap,
		QueueSize:             cfg.QueueSize,
		QueueTimeout:          cfg.QueueTimeout,
		CooldownBase:          cfg.CooldownBase,
		CooldownMax:           cfg.CooldownMax,
		Retries:               2,
		DialTimeout:           time.Second,
		ResponseHeaderTimeout: time.Second,
		MaxBodyBytes:          "1MiB",
		ReplicaHdr:            "X-LLMRoute-Replica",
		APIKey:                "sk-soak",
		LogLevel:              "ERROR",
	}
	for range cfg.Replicas {
		rp, err := fakereplica.Start(tracker)
		if err != nil {
			return nil, err
		}
		reps = append(reps, rp)
		site.Upstreams = append(site.Upstreams, rp.Addr())
	}
	var err error
	if site.AdminAddr, err = netx.FreeAddr(); err != nil {
		return nil, err
	}
	if site.ListenAddr, err = netx.FreeAddr(); err != nil {
		return nil, err
	}
	caddy, err := caddyproc.StartCaddy(ctx, cfg.Caddy, dir, site.Caddyfile(), site.AdminAddr, site.ListenAddr)
	if err != nil {
		return nil, err
	}
	defer caddy.Stop()

	tr := &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: cfg.MaxInFlight}
	defer tr.CloseIdleConnections()
	d := &driver{
		cfg: cfg, base: "http://" + site.ListenAddr, url: "http://" + site.ListenAddr + "/v1/chat/completions",
		client: &http.Client{Transport: tr, Timeout: 30 * time.Second},
		rng:    rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
	}
	d.buildMix()

	res := &Result{
		Duration: cfg.Duration.String(), Rate: cfg.Rate, Replicas: cfg.Replicas, Cap: cfg.Cap,
		Errors: map[string]int{}, Faults: map[string]int{}, UnexpectedFailures: map[string]int{},
		MaxConcurrent: map[string]int{},
	}

	// Warm up (connections, pools, first allocations), settle, measure.
	for i := range 10 {
		d.one(ctx, fmt.Sprintf("warmup-%d", i), KindOK)
	}
	settle := func() {
		tr.CloseIdleConnections()
		for _, r := range reps {
			r.CloseIdle()
		}
	}
	settle()
	res.Start = sampleSettled(ctx, caddy, 0, 0)
	logf(cfg.Progress, "soak: caddy pid %d, start: %d goroutines, RSS %.1f MiB", caddy.Pid(), res.Start.Goroutines, mib(res.Start.RSSBytes))

	// Drive.
	start := time.Now()
	driveCtx, stopDrive := context.WithTimeout(ctx, cfg.Duration)
	defer stopDrive()
	var wg sync.WaitGroup
	var inflight atomic.Int64
	var mu sync.Mutex
	var outcomes []outcome
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	progress := time.NewTicker(cfg.ProgressEvery)
	defer progress.Stop()
	var n, skipped int
	report := func() {
		mu.Lock()
		done := len(outcomes)
		ok := 0
		for _, o := range outcomes {
			if o.class == "ok" {
				ok++
			}
		}
		mu.Unlock()
		s := sample(ctx, caddy)
		logf(cfg.Progress, "soak: t=%4.0fs sent=%d done=%d ok=%d err=%d in_flight=%d skipped=%d goroutines=%d rss=%.1fMiB",
			time.Since(start).Seconds(), n, done, ok, done-ok, inflight.Load(), skipped, s.Goroutines, mib(s.RSSBytes))
	}
drive:
	for {
		select {
		case <-driveCtx.Done():
			break drive
		case <-progress.C:
			report()
		case <-ticker.C:
			if inflight.Load() >= int64(cfg.MaxInFlight) {
				skipped++
				continue
			}
			n++
			id := fmt.Sprintf("soak-%d", n)
			kind := d.pick()
			inflight.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer inflight.Add(-1)
				o := d.one(ctx, id, kind)
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
			}()
		}
	}
	// Drain: every request has a 30 s client timeout.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(45 * time.Second):
		res.Failures = append(res.Failures, "requests still running 45s after the soak stopped")
	}
	res.ElapsedSecs = time.Since(start).Seconds()
	report()

	// Reservations.
	waitCtx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	st, err := caddy.WaitIdle(waitCtx, 10*time.Second)
	cancel()
	if err != nil && st.Replicas == nil {
		res.Failures = append(res.Failures, fmt.Sprintf("reading /llm_route/state: %v", err))
	}
	res.LeakedReservations = st.TotalInFlight
	for _, r := range st.Replicas {
		if r.Probing && r.InFlight == 0 {
			res.LeakedReservations++ // a probe flag left without its request
		}
	}
	res.LeftQueued = st.Queued
	for _, tn := range st.Tenants {
		if math.Abs(tn.TokensCharged) > absurdCharge || math.Abs(tn.VirtualTokens) > absurdCharge || math.Abs(tn.TokensLeft) > absurdCharge {
			res.AbsurdTenants++
			res.Examples = append(res.Examples, fmt.Sprintf("tenant %s took an absurd usage: charged %g, virtual %g, left %g",
				tn.Name, tn.TokensCharged, tn.VirtualTokens, tn.TokensLeft))
		}
	}

	// What the client saw against what the replicas recorded.
	mu.Lock()
	defer mu.Unlock()
	res.Skipped = skipped
	okSent, okDone := 0, 0
	for _, o := range outcomes {
		res.Requests++
		res.Faults[o.kind]++
		if o.kind == KindOK {
			okSent++
			if o.class == "ok" {
				okDone++
			}
		}
		switch {
		case o.kind == KindForbidden && (o.class != "http_404_unknown_url" || len(tracker.Receipts(o.id)) > 0):
			res.ForbiddenPassed++
			res.example("forbidden path passed", o, tracker.Receipts(o.id))
		case o.kind == KindPoison && !strings.HasPrefix(o.class, "http_500_") && !expectedUnderFaults(o.class):
			res.PoisonNot500++
			res.example("poisoned request not answered 500", o, tracker.Receipts(o.id))
		}
		if o.class == "ok" {
			res.Successes++
		} else {
			res.Errors[o.class]++
			if (o.kind == KindOK || o.kind == KindSlow || o.kind == KindAbsurdUsage) && !expectedUnderFaults(o.class) {
				res.UnexpectedFailures[o.class]++
			}
		}
		if o.badError {
			res.BadErrorBodies++
		}
		receipts := tracker.Receipts(o.id)
		perReplica := map[string]int{}
		dup := false
		for _, rc := range receipts {
			if rc.BodyErr != "" {
				continue // a broken send, counted as a truncated body
			}
			perReplica[rc.Replica]++
			if perReplica[rc.Replica] > 1 {
				dup = true
			}
			if !o.firstByte.IsZero() && rc.At.After(o.firstByte) {
				dup = true
			}
		}
		for _, rc := range receipts {
			if rc.BodyErr != "" || (rc.ContentLength >= 0 && int64(rc.BodyLen) != rc.ContentLength) {
				res.TruncatedRequestBodies++
				res.example("truncated request body", o, receipts)
				break
			}
		}
		if dup {
			res.DuplicateSends++
			res.example("duplicate send", o, receipts)
		}
		// The client saw a whole answer that no replica sent, or a cut
		// answer (no other attempt sent a whole one) ended cleanly.
		anyDone, anyCut := false, false
		for _, rc := range receipts {
			anyDone = anyDone || rc.SentDone
			anyCut = anyCut || rc.Outcome == fakereplica.OutcomeCut
		}
		truncated := (o.sawDone && !anyDone) || (anyCut && !anyDone && !o.clientCut && o.cleanEnd)
		if truncated {
			res.TruncatedShownComplete++
			res.example("truncated shown as complete", o, receipts)
		}
	}
	if okSent > 0 {
		res.HealthySuccessRate = float64(okDone) / float64(okSent)
	}
	for _, r := range reps {
		m := tracker.MaxConcurrent(r.Addr())
		res.MaxConcurrent[r.Addr()] = m
		if m > cfg.Cap {
			res.CapViolations++
		}
	}

	// Goroutines and memory, once idle connections are gone.
	settle()
	res.End = sampleSettled(ctx, caddy, res.Start.Goroutines+cfg.MaxGoroutineGrowth, 10*time.Second)

	if res.LeakedReservations != 0 || res.LeftQueued != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("leaked reservations: %d in flight, %d queued after draining", res.LeakedReservations, res.LeftQueued))
	}
	if res.DuplicateSends != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d requests sent to a replica again after their first byte reached the client (or twice to one replica)", res.DuplicateSends))
	}
	if res.TruncatedShownComplete != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d cut answers shown to the client as complete", res.TruncatedShownComplete))
	}
	if res.TruncatedRequestBodies != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d requests reached a replica with a truncated body", res.TruncatedRequestBodies))
	}
	if res.BadErrorBodies != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d error answers not in OpenAI's error shape", res.BadErrorBodies))
	}
	if res.CapViolations != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d replicas saw more than %d requests at once", res.CapViolations, cfg.Cap))
	}
	if len(res.UnexpectedFailures) != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("fault-free requests failed unexpectedly: %v", res.UnexpectedFailures))
	}
	if res.ForbiddenPassed != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d requests for administrative endpoints reached a replica or got no 404", res.ForbiddenPassed))
	}
	if res.AbsurdTenants != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d tenants charged an engine's absurd usage", res.AbsurdTenants))
	}
	if res.PoisonNot500 != 0 {
		res.Failures = append(res.Failures, fmt.Sprintf("%d poisoned requests did not get the engine's 500", res.PoisonNot500))
	}
	if res.End.Goroutines > res.Start.Goroutines+cfg.MaxGoroutineGrowth {
		res.Failures = append(res.Failures, fmt.Sprintf("goroutines grew from %d to %d (allowed +%d)", res.Start.Goroutines, res.End.Goroutines, cfg.MaxGoroutineGrowth))
	}
	if res.Start.RSSBytes > 0 && res.End.RSSBytes > res.Start.RSSBytes+cfg.MaxRSSGrowth {
		res.Failures = append(res.Failures, fmt.Sprintf("RSS grew from %.1f MiB to %.1f MiB (allowed +%.0f MiB)", mib(res.Start.RSSBytes), mib(res.End.RSSBytes), mib(cfg.MaxRSSGrowth)))
	}
	if res.Requests == 0 {
		res.Failures = append(res.Failures, "no request was sent")
	}
	if caddy.Exited() {
		res.Failures = append(res.Failures, "caddy exited during the soak")
	}
	res.Pass = len(res.Failures) == 0
	return res, nil
}

// example records one request behind a failure, with its receipts.
func (r *Result) example(what string, o outcome, receipts []fakereplica.Receipt) {
	if len(r.Examples) >= 10 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s kind=%s client=%s done=%v clean=%v;", what, o.id, o.kind, o.class, o.sawDone, o.cleanEnd)
	for _, rc := range receipts {
		rel := "no first byte"
		if !o.firstByte.IsZero() {
			rel = fmt.Sprintf("%+.1fms after first byte", float64(rc.At.Sub(o.firstByte).Microseconds())/1000)
		}
		fmt.Fprintf(&b, " [%s %s fault=%s status=%d outcome=%s chunks=%d body=%d/%d%s]", rc.Replica, rel, rc.Fault, rc.Status, rc.Outcome, rc.ChunksSent, rc.BodyLen, rc.ContentLength, rc.BodyErr)
	}
	r.Examples = append(r.Examples, b.String())
}

// expectedUnderFaults reports whether a fault-free request may fail this
// way because other requests' faults made every replica cool down or the
// queue fill up.
func expectedUnderFaults(class string) bool {
	switch class {
	case "http_503_no_healthy_replica", "http_429_queue_full", "http_429_queue_timeout", "http_429_rate_limit_exceeded":
		return true
	}
	return false
}

// Summary renders the result for people.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests:           %d (%.1f/s over %.1fs; %d skipped at the client bound)\n", r.Requests, float64(r.Requests)/max(r.ElapsedSecs, 1e-9), r.ElapsedSecs, r.Skipped)
	fmt.Fprintf(&b, "successes:          %d (fault-free requests: %.1f%%)\n", r.Successes, 100*r.HealthySuccessRate)
	fmt.Fprintf(&b, "errors by class:    %s\n", fmtCounts(r.Errors))
	fmt.Fprintf(&b, "faults sent:        %s\n", fmtCounts(r.Faults))
	fmt.Fprintf(&b, "leaked reservations: %d (queued left: %d)\n", r.LeakedReservations, r.LeftQueued)
	fmt.Fprintf(&b, "duplicate sends:    %d\n", r.DuplicateSends)
	fmt.Fprintf(&b, "truncated shown as complete: %d\n", r.TruncatedShownComplete)
	fmt.Fprintf(&b, "truncated request bodies: %d\n", r.TruncatedRequestBodies)
	fmt.Fprintf(&b, "bad error bodies:   %d\n", r.BadErrorBodies)
	fmt.Fprintf(&b, "forbidden passed:   %d; poisoned not 500: %d\n", r.ForbiddenPassed, r.PoisonNot500)
	fmt.Fprintf(&b, "cap violations:     %d (max concurrent per replica %s, cap %d)\n", r.CapViolations, fmtCounts(r.MaxConcurrent), r.Cap)
	fmt.Fprintf(&b, "goroutines:         %d -> %d\n", r.Start.Goroutines, r.End.Goroutines)
	fmt.Fprintf(&b, "caddy RSS:          %.1f MiB -> %.1f MiB\n", mib(r.Start.RSSBytes), mib(r.End.RSSBytes))
	for _, e := range r.Examples {
		fmt.Fprintf(&b, "example: %s\n", e)
	}
	if r.Pass {
		b.WriteString("PASS\n")
	} else {
		b.WriteString("FAIL:\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "  - %s\n", f)
		}
	}
	return b.String()
}

// WriteJSON writes the result to path.
func (r *Result) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func fmtCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Itoa(m[k])
	}
	return strings.Join(parts, " ")
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}

func sample(ctx context.Context, c *caddyproc.Caddy) Sample {
	var s Sample
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s.Goroutines, _ = c.Goroutines(sctx)
	s.RSSBytes, _ = c.RSS()
	return s
}

// sampleSettled samples until goroutines are at most target (0: after a
// short settle) or wait passes, and returns the last sample.
func sampleSettled(ctx context.Context, c *caddyproc.Caddy, target int, wait time.Duration) Sample {
	if target <= 0 {
		time.Sleep(300 * time.Millisecond) // let closed connections' goroutines exit
		return sample(ctx, c)
	}
	deadline := time.Now().Add(wait)
	for {
		s := sample(ctx, c)
		if s.Goroutines <= target || time.Now().After(deadline) {
			return s
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// driver sends the soak's requests.
type driver struct {
	cfg    Config
	base   string
	url    string
	client *http.Client

	rngMu sync.Mutex
	rng   *rand.Rand
	kinds []string
	cum   []float64
}

func (d *driver) buildMix() {
	for k := range d.cfg.Mix {
		d.kinds = append(d.kinds, k)
	}
	sort.Strings(d.kinds)
	total := 0.0
	for _, k := range d.kinds {
		total += d.cfg.Mix[k]
		d.cum = append(d.cum, total)
	}
}

func (d *driver) pick() string {
	d.rngMu.Lock()
	defer d.rngMu.Unlock()
	x := d.rng.Float64() * d.cum[len(d.cum)-1]
	for i, c := range d.cum {
		if x < c {
			return d.kinds[i]
		}
	}
	return d.kinds[len(d.kinds)-1]
}

func (d *driver) intn(n int) int {
	d.rngMu.Lock()
	defer d.rngMu.Unlock()
	return d.rng.IntN(n)
}

func (d *driver) float() float64 {
	d.rngMu.Lock()
	defer d.rngMu.Unlock()
	return d.rng.Float64()
}

// prompts share a few long prefixes, so that prefix routing has work.
var prefixes = []string{
	strings.Repeat("You are a helpful assistant for the soak test. Answer briefly. ", 8),
	strings.Repeat("System: you translate English to French, word for word. ", 10),
	strings.Repeat("Context: the llmroute router spreads requests across replicas. ", 6),
}

// one sends one request with the given fault kind and reads its answer.
func (d *driver) one(ctx context.Context, id, kind string) outcome {
	o := outcome{id: id, kind: kind}
	stream := d.float() < d.cfg.StreamShare
	hdr := map[string]string{
		fakereplica.HeaderChunks: strconv.Itoa(3 + d.intn(6)),
	}
	switch kind {
	case KindPoison:
		hdr[fakereplica.HeaderFault] = Kind500 // on every replica it reaches
		hdr[fakereplica.HeaderRetryAfter] = "none"
	case Kind429, Kind503, Kind500:
		hdr[fakereplica.HeaderFault] = kind
		hdr[fakereplica.HeaderFaultOnce] = "1"
		if d.intn(10) == 0 {
			hdr[fakereplica.HeaderRetryAfter] = "1"
		} else {
			hdr[fakereplica.HeaderRetryAfter] = "none"
		}
	case KindStall:
		hdr[fakereplica.HeaderFault] = fakereplica.FaultStall
		hdr[fakereplica.HeaderFaultOnce] = "1"
		hdr[fakereplica.HeaderStall] = "5s"
	case KindCut:
		hdr[fakereplica.HeaderFault] = fakereplica.FaultCut
		hdr[fakereplica.HeaderCutAfter] = strconv.Itoa(d.intn(4))
		switch d.intn(3) {
		case 0:
			hdr[fakereplica.HeaderCutMode] = "fin"
		case 1:
			// Unframed, closed cleanly: only the protocol shows the cut.
			hdr[fakereplica.HeaderCutMode] = fakereplica.CutUnframed
		}
	case KindAbsurdUsage:
		stream = false // a whole answer always carries its usage
		hdr[fakereplica.HeaderTotalTokens] = []string{"4611686018427387904", "4611686018427387904", "-1000000"}[d.intn(3)]
	case KindSlow:
		hdr[fakereplica.HeaderFault] = fakereplica.FaultSlow
		hdr[fakereplica.HeaderDelay] = strconv.Itoa(10+d.intn(40)) + "ms"
	case KindDisconnect:
		stream = true
		hdr[fakereplica.HeaderFault] = fakereplica.FaultSlow
		hdr[fakereplica.HeaderDelay] = "50ms"
		hdr[fakereplica.HeaderChunks] = "10"
	}
	body, _ := json.Marshal(map[string]any{
		"model": "soak-model",
		"messages": []map[string]string{
			{"role": "system", "content": prefixes[d.intn(len(prefixes))]},
			{"role": "user", "content": fmt.Sprintf("question %d", d.intn(1000))},
		},
		"stream":         stream,
		"stream_options": map[string]bool{"include_usage": d.intn(2) == 0},
	})
	if !stream {
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		delete(m, "stream_options")
		body, _ = json.Marshal(m)
	}

	url := d.url
	if kind == KindForbidden {
		url = d.base + forbiddenPaths[d.intn(len(forbiddenPaths))]
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, strings.NewReader(string(body)))
	if err != nil {
		o.class = "client_error"
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-soak")
	req.Header.Set(fakereplica.HeaderRequestID, id)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		o.class = "client_error"
		return o
	}
	o.firstByte = time.Now()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		code := openai.ErrorCode(b)
		if code == "" {
			o.badError = true
			code = "unparsed"
		}
		o.class = fmt.Sprintf("http_%d_%s", resp.StatusCode, code)
		if (resp.StatusCode == 429 || resp.StatusCode == 503) && resp.Header.Get("Retry-After") == "" {
			o.badError = true
		}
		return o
	}
	if kind == KindDisconnect {
		// Read one event, then go away.
		buf := make([]byte, 1)
		_, _ = resp.Body.Read(buf)
		cancel()
		o.clientCut = true
		o.class = "client_disconnect"
		return o
	}
	b, err := io.ReadAll(resp.Body)
	o.cleanEnd = err == nil
	if stream {
		o.sawDone = strings.Contains(string(b), "data: [DONE]")
		switch {
		case o.cleanEnd && o.sawDone:
			o.class = "ok"
		case o.cleanEnd:
			o.class = "stream_ended_without_done"
		default:
			o.class = "stream_broken"
		}
		return o
	}
	var v struct {
		Object string `json:"object"`
	}
	switch {
	case err != nil:
		o.class = "body_broken"
	case json.Unmarshal(b, &v) != nil || v.Object != openai.CompletionObject:
		o.class = "body_invalid"
	default:
		o.class = "ok"
		o.sawDone = true // a whole JSON answer counts as complete
	}
	return o
}
