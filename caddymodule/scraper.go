package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
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
	// APIKey is sent as "Authorization: Bearer <key>" with each scrape:
	// llama.cpp's server started with --api-key answers /metrics 401
	// without it (vLLM checks keys under /v1 only, SGLang never on
	// /metrics). {env.*} and {file.*} placeholders are resolved once.
	// Default none.
	APIKey string `json:"api_key,omitempty"`

	// bearer is the resolved Authorization header value ("" for none).
	bearer string
}

// resolve resolves the key's placeholders.
func (c *EngineMetricsConfig) resolve(repl *caddy.Replacer) error {
	if c.APIKey == "" {
		return nil
	}
	v, err := repl.ReplaceOrErr(c.APIKey, true, true)
	if err != nil {
		return fmt.Errorf("engine_metrics api_key: %v", err)
	}
	c.bearer = "Bearer " + v
	return nil
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

// scraper polls the engine metrics of every replica a policy has seen, on
// one goroutine that stop ends.
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

// watch adds a replica, scraping it at once the first time.
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
	if sc.cfg.bearer != "" {
		req.Header.Set("Authorization", sc.cfg.bearer)
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
	st.apply(st.clk.Now(), smp, time.Duration(sc.cfg.StaleAfter))
}
