package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one Prometheus sample: labels and value.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Scrape fetches Prometheus text from url and returns the samples of the
// families whose names start with one of prefixes.
func Scrape(ctx context.Context, hc *http.Client, url string, prefixes ...string) (map[string][]Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	out := map[string][]Sample{}
	for name, f := range fams {
		keep := false
		for _, pre := range prefixes {
			keep = keep || strings.HasPrefix(name, pre)
		}
		if !keep {
			continue
		}
		for _, m := range f.GetMetric() {
			s := Sample{Labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.Counter != nil:
				s.Value = m.GetCounter().GetValue()
			case m.Gauge != nil:
				s.Value = m.GetGauge().GetValue()
			case m.Untyped != nil:
				s.Value = m.GetUntyped().GetValue()
			default:
				continue
			}
			out[name] = append(out[name], s)
		}
	}
	return out, nil
}

// Sum adds the samples of family name whose labels include match.
func Sum(m map[string][]Sample, name string, match map[string]string) float64 {
	total := 0.0
outer:
	for _, s := range m[name] {
		for k, v := range match {
			if s.Labels[k] != v {
				continue outer
			}
		}
		total += s.Value
	}
	return total
}

// Prediction is how well the router's residency beliefs matched the
// engines' reports over one run.
type Prediction struct {
	// From /llm_route/state, summed over replicas. A check is a response
	// that carried cached-token usage: hit = the router predicted a cached
	// prefix and the engine reported cached tokens, miss = predicted but
	// the engine reported none, partial = it reported less than half of
	// the prediction, cold = nothing predicted, concurrent = predicted and
	// less reported while the same prefix was still before its first byte
	// on the replica (neither hit nor miss).
	Checks     int     `json:"checks"`
	Hits       int     `json:"hits"`
	Misses     int     `json:"misses"`
	Partials   int     `json:"partials"`
	Cold       int     `json:"cold"`
	Concurrent int     `json:"concurrent"`
	Precision  float64 `json:"precision"` // hits / (hits + misses + partials)
	Purges     int     `json:"index_purges"`
	// From llmroute's metrics on Caddy's admin /metrics.
	PredictedCachedTokens float64 `json:"predicted_cached_tokens"`
	ReportedCachedTokens  float64 `json:"reported_cached_tokens"`
	RouterPromptTokens    float64 `json:"router_prompt_tokens"`
	// PredictedOverReported is predicted / reported cached tokens (1 =
	// the index's beliefs sized the engine's cache hits exactly).
	PredictedOverReported float64            `json:"predicted_over_reported,omitempty"`
	Results               map[string]float64 `json:"predictions_total"` // by result label
	// Outcomes is llmroute_requests_total by outcome label.
	Outcomes        map[string]float64 `json:"requests_by_outcome"`
	EngineScrapeOK  bool               `json:"engine_metrics_scraped"`
	EngineScrapeErr string             `json:"engine_metrics_error,omitempty"`
	PerReplica      []stateapi.Replica `json:"per_replica"`
}

// Admin returns a client of Caddy's admin API at base (like
// http://127.0.0.1:2119) that sends with hc.
func Admin(hc *http.Client, base string) *caddyproc.Admin {
	return &caddyproc.Admin{Addr: strings.TrimPrefix(base, "http://"), Client: hc}
}

// ReadPrediction reads the router's state and metrics from Caddy's admin
// endpoint (base like http://127.0.0.1:2119).
func ReadPrediction(ctx context.Context, hc *http.Client, base string) (Prediction, error) {
	p := Prediction{Results: map[string]float64{}, Outcomes: map[string]float64{}}
	st, err := Admin(hc, base).State(ctx)
	if err != nil {
		return p, err
	}
	p.PerReplica = st.Replicas
	p.EngineScrapeOK = len(st.Replicas) > 0
	for _, r := range st.Replicas {
		f := r.Feedback
		p.Checks += f.Checks
		p.Hits += f.Hits
		p.Misses += f.Misses
		p.Partials += f.Partials
		p.Cold += f.Cold
		p.Concurrent += f.Concurrent
		p.Purges += f.Purges
		if r.Engine == nil || r.Engine.Engine == "" {
			p.EngineScrapeOK = false
		}
		if r.Engine != nil && r.Engine.LastError != "" {
			p.EngineScrapeErr = r.Addr + ": " + r.Engine.LastError
		}
	}
	if judged := p.Hits + p.Misses + p.Partials; judged > 0 {
		p.Precision = float64(p.Hits) / float64(judged)
	}
	m, err := Scrape(ctx, hc, base+"/metrics", "llmroute_")
	if err != nil {
		return p, err
	}
	p.PredictedCachedTokens = Sum(m, "llmroute_predicted_cached_tokens_total", nil)
	p.ReportedCachedTokens = Sum(m, "llmroute_reported_cached_tokens_total", nil)
	p.RouterPromptTokens = Sum(m, "llmroute_prompt_tokens_total", nil)
	for _, res := range []string{"hit", "miss", "partial", "concurrent", "cold"} {
		p.Results[res] = Sum(m, "llmroute_predictions_total", map[string]string{"result": res})
	}
	for _, s := range m["llmroute_requests_total"] {
		p.Outcomes[s.Labels["outcome"]] += s.Value
	}
	if p.ReportedCachedTokens > 0 {
		p.PredictedOverReported = p.PredictedCachedTokens / p.ReportedCachedTokens
	}
	return p, nil
}

// Add accumulates o into p (counts and token totals; per-replica detail is
// appended) and recomputes the ratios.
func (p *Prediction) Add(o Prediction) {
	if p.Results == nil {
		p.Results = map[string]float64{}
	}
	if p.Outcomes == nil {
		p.Outcomes = map[string]float64{}
		p.EngineScrapeOK = true
	}
	p.Checks += o.Checks
	p.Hits += o.Hits
	p.Misses += o.Misses
	p.Partials += o.Partials
	p.Cold += o.Cold
	p.Concurrent += o.Concurrent
	p.Purges += o.Purges
	p.PredictedCachedTokens += o.PredictedCachedTokens
	p.ReportedCachedTokens += o.ReportedCachedTokens
	p.RouterPromptTokens += o.RouterPromptTokens
	for k, v := range o.Results {
		p.Results[k] += v
	}
	for k, v := range o.Outcomes {
		p.Outcomes[k] += v
	}
	p.EngineScrapeOK = p.EngineScrapeOK && o.EngineScrapeOK
	if o.EngineScrapeErr != "" {
		p.EngineScrapeErr = o.EngineScrapeErr
	}
	p.PerReplica = append(p.PerReplica, o.PerReplica...)
	p.Precision, p.PredictedOverReported = 0, 0
	if judged := p.Hits + p.Misses + p.Partials; judged > 0 {
		p.Precision = float64(p.Hits) / float64(judged)
	}
	if p.ReportedCachedTokens > 0 {
		p.PredictedOverReported = p.PredictedCachedTokens / p.ReportedCachedTokens
	}
}
