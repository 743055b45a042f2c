package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"slices"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/trace"
	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// Calibration is what a cold server costs, measured on one server of its
// own before the runs: llama-server's own timings of a few cold prompts of
// the trace's text.
type Calibration struct {
	Prompts int `json:"prompts"`
	// EngineTokensPerToken is the server's prompt tokens for one of the
	// trace generator's tokens.
	EngineTokensPerToken float64 `json:"engine_tokens_per_token"`
	// PrefillMsPerToken is per generator token; DecodeMsPerToken per
	// answer token.
	PrefillMsPerToken float64 `json:"prefill_ms_per_token"`
	DecodeMsPerToken  float64 `json:"decode_ms_per_token"`
}

// coldSeconds is one request's service time on a server with nothing
// cached.
func (c Calibration) coldSeconds(prompt, output float64) float64 {
	return (prompt*c.PrefillMsPerToken + output*c.DecodeMsPerToken) / 1000
}

// calibrationPrompts is how many cold prompts calibrate measures.
const calibrationPrompts = 4

// calibrate starts one server, sends it calibrationPrompts prompts of
// different prefix families whose lengths are nearest the trace sample's
// mean, and reads the server's timings of each.
func calibrate(ctx context.Context, c config, recs []trace.Record) (Calibration, error) {
	w, err := trace.Workload(recs, trace.Options{BlockTokens: c.BlockTokens, Sample: c.Requests, Seed: 0x63616c}, nil)
	if err != nil {
		return Calibration{}, err
	}
	type cand struct {
		text   string
		tokens int
	}
	var cands []cand
	seen := map[int]bool{}
	for _, s := range w.Sessions {
		if seen[s.Group] {
			continue
		}
		seen[s.Group] = true
		text := s.Turns[0].User.Text
		if s.System != nil {
			text = s.System.Text + text
		}
		cands = append(cands, cand{text, len(simengine.Tokenize(text))})
	}
	mean := w.MeanPromptTokens
	slices.SortFunc(cands, func(a, b cand) int {
		return cmp.Compare(math.Abs(float64(a.tokens)-mean), math.Abs(float64(b.tokens)-mean))
	})
	if len(cands) < calibrationPrompts {
		return Calibration{}, fmt.Errorf("the sample has %d prefix families, want %d", len(cands), calibrationPrompts)
	}
	p, addr, err := startServer(ctx, c, "server-calibration.log")
	if err != nil {
		return Calibration{}, err
	}
	defer p.Stop(3 * time.Second)
	var gen, eng, preMs, decMs float64
	var decN int
	for _, cd := range cands[:calibrationPrompts] {
		t, err := complete(ctx, addr, cd.text, 16)
		if err != nil {
			return Calibration{}, fmt.Errorf("%w\n%s", err, p.LogTail(10))
		}
		if t.PromptN < cd.tokens/2 {
			return Calibration{}, fmt.Errorf("the server evaluated %d of a %d-token prompt: not cold", t.PromptN, cd.tokens)
		}
		gen += float64(cd.tokens)
		eng += float64(t.PromptN)
		preMs += t.PromptMs
		decMs += t.PredictedMs
		decN += t.PredictedN
	}
	if gen == 0 || eng == 0 || decN == 0 {
		return Calibration{}, fmt.Errorf("no timings")
	}
	return Calibration{Prompts: calibrationPrompts, EngineTokensPerToken: eng / gen, PrefillMsPerToken: preMs / gen, DecodeMsPerToken: decMs / float64(decN)}, nil
}

// timings is llama-server's own account of one completion.
type timings struct {
	PromptN     int     `json:"prompt_n"`
	PromptMs    float64 `json:"prompt_ms"`
	PredictedN  int     `json:"predicted_n"`
	PredictedMs float64 `json:"predicted_ms"`
}

// complete sends text to llama-server's native /completion (no chat
// template: the random-weight model's output need not parse as one) and
// returns its timings.
func complete(ctx context.Context, addr, text string, n int) (timings, error) {
	body, _ := json.Marshal(map[string]any{"prompt": text, "n_predict": n, "ignore_eos": true, "cache_prompt": true, "temperature": 0})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/completion", bytes.NewReader(body))
	if err != nil {
		return timings{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: 5 * time.Minute}).Do(req)
	if err != nil {
		return timings{}, err
	}
	defer resp.Body.Close()
	var out struct {
		Timings *timings `json:"timings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK || out.Timings == nil {
		return timings{}, fmt.Errorf("/completion: status %d, %v, timings %v", resp.StatusCode, err, out.Timings != nil)
	}
	return *out.Timings, nil
}

// tracePlan is seed's sample of the trace, its arrivals compressed to
// c.Util of the two servers' cold capacity, as the load generator's plan.
func tracePlan(c config, recs []trace.Record, seed uint64, cal Calibration) ([]client.Request, Sample, error) {
	o := trace.Options{BlockTokens: c.BlockTokens, Sample: c.Requests, Seed: seed}
	w, err := trace.Workload(recs, o, os.Stderr)
	if err != nil {
		return nil, Sample{}, err
	}
	rate := c.Util * 2 / cal.coldSeconds(w.MeanPromptTokens, w.MeanOutputTokens)
	w.ScaleRate(rate)
	plan := make([]client.Request, len(w.Sessions))
	for i, s := range w.Sessions {
		r := client.Request{Index: i, Group: s.Group, At: s.Arrival, Prev: -1, User: s.Turns[0].User.Text, MaxTokens: s.Turns[0].Output}
		if s.System != nil {
			r.System = s.System.Text
		}
		plan[i] = r
	}
	return plan, Sample{Seed: seed, Stats: trace.Describe(recs, o), Rate: rate}, nil
}

// cacheMiB is a server's --cache-ram for smp: c.CacheShare of its half of
// the sample's working set (distinct trace blocks, in engine tokens as the
// calibration counts them) at c.KVBytes a token. llama-server keeps whole
// prompts in that cache, not blocks, so it holds less of the working set
// than a block cache of the same size.
func cacheMiB(c config, smp Sample, cal Calibration) int {
	tokens := float64(smp.Stats.WorkingSetTokens) * cal.EngineTokensPerToken / 2
	return max(1, int(math.Ceil(c.CacheShare*tokens*float64(c.KVBytes)/(1<<20))))
}

// cacheSetup describes the servers' RAM prompt cache.
func cacheSetup(c config) string {
	if c.CacheShare <= 0 {
		return "llama-server's default RAM prompt cache (8 GiB: the whole working set)"
	}
	return fmt.Sprintf("a RAM prompt cache (--cache-ram) of %.2gx a server's half of the sample's working set at %d KV bytes a token", c.CacheShare, c.KVBytes)
}
