package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"
)

// EngineMetricsConfig configures scraping of the replicas' own metrics.
type EngineMetricsConfig struct {
	// Path is the metrics path on each replica. Default /metrics.
	Path string `json:"path,omitempty"`
	// Scheme is http or https. Default http.
	Scheme string `json:"scheme,omitempty"`
	// Interval between scrapes. Default 1s.
	Interval caddy.Duration `json:"interval,omitempty"`
	// Timeout of one scrape. Default 500ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// StaleAfter is the age past which scraped values count as unknown
	// (never as idle). Default three intervals.
	StaleAfter caddy.Duration `json:"stale_after,omitempty"`
}

func (c *EngineMetricsConfig) defaults() {
	if c.Path == "" {
		c.Path = "/metrics"
	}
	if c.Scheme == "" {
		c.Scheme = "http"
	}
	if c.Interval == 0 {
		c.Interval = caddy.Duration(time.Second)
	}
	if c.Timeout == 0 {
		c.Timeout = caddy.Duration(500 * time.Millisecond)
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 3 * c.Interval
	}
}

func (c *EngineMetricsConfig) validate() error {
	if c.Scheme != "" && c.Scheme != "http" && c.Scheme != "https" {
		return fmt.Errorf("engine_metrics scheme must be http or https")
	}
	if c.Interval < 0 || c.Timeout < 0 || c.StaleAfter < 0 {
		return fmt.Errorf("engine_metrics durations must be >= 0")
	}
	return nil
}

// parseEngineMetrics reads `engine_metrics [<path>] { ... }`.
func parseEngineMetrics(d *caddyfile.Dispenser) (*EngineMetricsConfig, error) {
	cfg := &EngineMetricsConfig{}
	if d.NextArg() {
		cfg.Path = d.Val()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		key := d.Val()
		if !d.NextArg() {
			return nil, d.ArgErr()
		}
		if key == "scheme" {
			cfg.Scheme = d.Val()
			continue
		}
		dur, err := caddy.ParseDuration(d.Val())
		if err != nil {
			return nil, d.Errf("engine_metrics %s: %v", key, err)
		}
		switch key {
		case "interval":
			cfg.Interval = caddy.Duration(dur)
		case "timeout":
			cfg.Timeout = caddy.Duration(dur)
		case "stale_after":
			cfg.StaleAfter = caddy.Duration(dur)
		default:
			return nil, d.Errf("unrecognized engine_metrics option %q", key)
		}
	}
	return cfg, nil
}

// engineLoad is the last scrape of one replica. Guarded by replicaState.mu.
type engineLoad struct {
	at         time.Time
	staleAfter time.Duration
	engine     string // vllm, sglang, llamacpp
	waiting    float64
	running    float64
	kvUsage    float64 // -1 when not reported
	numBlocks  int
	blockSize  int
	queries    float64 // prefix cache queries counter, -1 when absent
	hits       float64
	lastErr    string
}

// EngineLoadStatus is engineLoad as /llm_route/state shows it.
type EngineLoadStatus struct {
	Engine     string  `json:"engine,omitempty"`
	AgeSeconds float64 `json:"age_seconds"`
	Stale      bool    `json:"stale"`
	Waiting    float64 `json:"waiting"`
	Running    float64 `json:"running"`
	KVUsage    float64 `json:"kv_usage"`
	NumBlocks  int     `json:"num_gpu_blocks,omitempty"`
	Queries    float64 `json:"prefix_cache_queries"`
	Hits       float64 `json:"prefix_cache_hits"`
	BlockSize  int     `json:"block_size,omitempty"`
	LastError  string  `json:"last_error,omitempty"`
}

func (e *engineLoad) status(now time.Time) *EngineLoadStatus {
	if e.at.IsZero() && e.lastErr == "" {
		return nil
	}
	return &EngineLoadStatus{
		Engine: e.engine, AgeSeconds: now.Sub(e.at).Seconds(), Stale: e.stale(now),
		Waiting: e.waiting, Running: e.running, KVUsage: e.kvUsage,
		NumBlocks: e.numBlocks, BlockSize: e.blockSize, LastError: e.lastErr,
		Queries: e.queries, Hits: e.hits,
	}
}

func (e *engineLoad) stale(now time.Time) bool {
	return e.at.IsZero() || now.Sub(e.at) > e.staleAfter
}

// engineViewLocked returns what the strategies see: queue, running and KV
// usage, each -1 when unknown or stale. The caller holds s.mu.
func (s *replicaState) engineViewLocked(now time.Time) (waiting, running int, kv float64) {
	e := &s.engine
	if e.stale(now) {
		return -1, -1, -1
	}
	return int(e.waiting), int(e.running), e.kvUsage
}

// engineSample is one parsed scrape.
type engineSample struct {
	engine           string
	waiting, running float64
	kvUsage          float64
	numBlocks        int
	blockSize        int
	queries, hits    float64
	hasLoad          bool
}

// metricNames maps each engine's metric names (old and new spellings) to
// what they mean.
var (
	waitingNames = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "sglang_num_queue_reqs", "llamacpp:requests_deferred"}
	runningNames = []string{"vllm:num_requests_running", "sglang:num_running_reqs", "sglang_num_running_reqs", "llamacpp:requests_processing"}
	kvNames      = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage", "sglang_token_usage"}
	queryNames   = []string{"vllm:prefix_cache_queries", "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_queries_total"}
	hitNames     = []string{"vllm:prefix_cache_hits", "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_hits_total"}
)

// parseEngineSample reads Prometheus text exposition with the Prometheus
// text parser and picks out the load signals of vLLM, SGLang or llama.cpp.
func parseEngineSample(r io.Reader) (engineSample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return engineSample{}, err
	}
	s := engineSample{kvUsage: -1, queries: -1, hits: -1}
	sum := func(names []string) (float64, string, bool) {
		for _, n := range names {
			if f, ok := fams[n]; ok {
				total := 0.0
				for _, m := range f.GetMetric() {
					total += value(m)
				}
				return total, n, true
			}
		}
		return 0, "", false
	}
	if v, n, ok := sum(waitingNames); ok {
		s.waiting, s.hasLoad, s.engine = v, true, engineOf(n)
	}
	if v, n, ok := sum(runningNames); ok {
		s.running, s.hasLoad = v, true
		if s.engine == "" {
			s.engine = engineOf(n)
		}
	}
	if v, _, ok := sum(kvNames); ok {
		s.kvUsage = v
	}
	if v, _, ok := sum(queryNames); ok {
		s.queries = v
	}
	if v, _, ok := sum(hitNames); ok {
		s.hits = v
	}
	if f, ok := fams["vllm:cache_config_info"]; ok {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "num_gpu_blocks":
					fmt.Sscan(l.GetValue(), &s.numBlocks)
				case "block_size":
					fmt.Sscan(l.GetValue(), &s.blockSize)
				}
			}
		}
	}
	return s, nil
}

func engineOf(name string) string {
	switch {
	case strings.HasPrefix(name, "vllm"):
		return "vllm"
	case strings.HasPrefix(name, "sglang"):
		return "sglang"
	case strings.HasPrefix(name, "llamacpp"):
		return "llamacpp"
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}

// apply stores a sample, resizes the index from the engine's cache size and
// purges the index when the engine's counters went backwards (a restart).
func (s *replicaState) apply(now time.Time, smp engineSample, staleAfter time.Duration, routerBlockBytes int) {
	s.mu.Lock()
	prevQueries := s.engine.queries
	s.engine = engineLoad{
		at: now, staleAfter: staleAfter, engine: smp.engine, waiting: smp.waiting, running: smp.running,
		kvUsage: smp.kvUsage, numBlocks: smp.numBlocks, blockSize: smp.blockSize,
		queries: smp.queries, hits: smp.hits,
	}
	if !smp.hasLoad {
		// Metrics without load figures tell us nothing: unknown, not idle.
		s.engine.at = time.Time{}
	}
	restarted := prevQueries > 0 && smp.queries >= 0 && smp.queries < prevQueries
	sized := false
	if smp.numBlocks > 0 && smp.blockSize > 0 {
		// ~4 bytes of text per token: the engine's cache holds about this
		// many router blocks.
		capBlocks := smp.numBlocks * smp.blockSize * 4 / max(routerBlockBytes, 1)
		s.feedback.engineSized = true
		s.feedback.maxCapacity = max(capBlocks, 64)
		sized = true
	}
	maxCap := s.feedback.maxCapacity
	s.mu.Unlock()
	if restarted {
		s.purge("counters_reset")
	}
	if sized && s.index.Capacity() > maxCap {
		s.index.SetCapacity(maxCap)
	}
}

// scraper polls the engine metrics of every replica a policy has seen.
type scraper struct {
	cfg    EngineMetricsConfig
	logger *zap.Logger
	client *http.Client
	mu     sync.Mutex
	states map[string]*replicaState
	cancel context.CancelFunc
	done   chan struct{}
}

func newScraper(cfg EngineMetricsConfig, logger *zap.Logger) *scraper {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	sc := &scraper{
		cfg: cfg, logger: logger, states: map[string]*replicaState{},
		client: &http.Client{Timeout: time.Duration(cfg.Timeout)},
		cancel: cancel, done: make(chan struct{}),
	}
	go sc.run(ctx)
	return sc
}

func (sc *scraper) watch(st *replicaState) {
	sc.mu.Lock()
	_, known := sc.states[st.addr]
	sc.states[st.addr] = st
	sc.mu.Unlock()
	if !known {
		go sc.scrapeOne(context.Background(), st)
	}
}

func (sc *scraper) unwatch(addr string) {
	sc.mu.Lock()
	delete(sc.states, addr)
	sc.mu.Unlock()
}

func (sc *scraper) stop() {
	sc.cancel()
	<-sc.done
}

func (sc *scraper) run(ctx context.Context) {
	defer close(sc.done)
	t := time.NewTicker(time.Duration(sc.cfg.Interval))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sc.mu.Lock()
		list := make([]*replicaState, 0, len(sc.states))
		for _, st := range sc.states {
			list = append(list, st)
		}
		sc.mu.Unlock()
		var wg sync.WaitGroup
		for _, st := range list {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc.scrapeOne(ctx, st)
			}()
		}
		wg.Wait()
	}
}

func (sc *scraper) scrapeOne(ctx context.Context, st *replicaState) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(sc.cfg.Timeout))
	defer cancel()
	url := sc.cfg.Scheme + "://" + st.addr + sc.cfg.Path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := sc.client.Do(req)
	if err != nil {
		st.scrapeFailed(err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		st.scrapeFailed(resp.Status)
		return
	}
	smp, err := parseEngineSample(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		st.scrapeFailed("parse: " + err.Error())
		return
	}
	st.apply(time.Now(), smp, time.Duration(sc.cfg.StaleAfter), routerBlockBytes)
}

// routerBlockBytes is the prefix block size the index counts in.
var routerBlockBytes = 128

// scrapeFailed keeps the old values, which go stale on their own.
func (s *replicaState) scrapeFailed(msg string) {
	s.mu.Lock()
	s.engine.lastErr = msg
	s.mu.Unlock()
}
