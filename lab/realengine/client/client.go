package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/openai"
	"github.com/llmroute/caddy-llmroute/internal/stats"
)

// Result is what the client saw of one request.
type Result struct {
	Index        int     `json:"index"`
	Group        int     `json:"group"`
	SentAtMs     float64 `json:"sent_at_ms"`
	Status       int     `json:"status"`
	Replica      string  `json:"replica,omitempty"`
	TTFTMs       float64 `json:"ttft_ms"` // -1 when no token arrived
	E2EMs        float64 `json:"e2e_ms"`
	Chunks       int     `json:"chunks"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	HasUsage     bool    `json:"has_usage"`
	Finish       string  `json:"finish_reason,omitempty"`
	Slot         int     `json:"engine_slot"`       // from the replica's x-engine-slot header; -1 unknown
	BusyReuse    int     `json:"engine_busy_reuse"` // tokens a busy slot held for this prompt
	Done         bool    `json:"done"`              // saw data: [DONE]
	Complete     bool    `json:"complete"`          // 200, a finish_reason, [DONE] and usage
	Error        string  `json:"error,omitempty"`
}

// Client sends requests to one OpenAI-compatible endpoint.
type Client struct {
	URL           string // e.g. http://127.0.0.1:8480/v1/chat/completions
	Model         string
	MaxTokens     int
	ReplicaHeader string
	HTTP          *http.Client
}

type chatReq struct {
	Model         string              `json:"model"`
	Messages      []map[string]string `json:"messages"`
	MaxTokens     int                 `json:"max_tokens"`
	Stream        bool                `json:"stream"`
	StreamOptions map[string]bool     `json:"stream_options"`
	IgnoreEOS     bool                `json:"ignore_eos"`
	Temperature   float64             `json:"temperature"`
}

// Do streams one request and measures it. TTFT is the time from sending to
// the first chunk that carries generated text.
func (c *Client) Do(ctx context.Context, r Request, start time.Time) (res Result) {
	res = Result{Index: r.Index, Group: r.Group, TTFTMs: -1, Slot: -1}
	body, _ := json.Marshal(chatReq{
		Model: c.Model, MaxTokens: c.MaxTokens, Stream: true, IgnoreEOS: true,
		StreamOptions: map[string]bool{"include_usage": true},
		Messages:      []map[string]string{{"role": "system", "content": r.System}, {"role": "user", "content": r.User}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		res.Error = err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Bench-Request", strconv.Itoa(r.Index))
	sent := time.Now()
	res.SentAtMs = ms(sent.Sub(start))
	defer func() { res.E2EMs = ms(time.Since(sent)) }()
	resp, err := c.HTTP.Do(req)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer resp.Body.Close()
	res.Status = resp.StatusCode
	if c.ReplicaHeader != "" {
		res.Replica = resp.Header.Get(c.ReplicaHeader)
	}
	if h := resp.Header.Get("X-Engine-Slot"); h != "" {
		fmt.Sscanf(h, "slot=%d reuse=%d busy_reuse=%d", &res.Slot, new(int), &res.BusyReuse)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.Error = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		return res
	}
	st := openai.ReadStream(resp.Body)
	res.Done, res.Chunks, res.Finish = st.Done, st.Chunks, st.Finish
	if !st.FirstContent.IsZero() {
		res.TTFTMs = ms(st.FirstContent.Sub(sent))
	}
	if st.Usage != nil {
		res.HasUsage = true
		res.PromptTokens, res.CachedTokens = st.Usage.PromptTokens, st.Usage.Cached()
	}
	if st.BadChunk != nil {
		res.Error = "bad chunk: " + st.BadChunk.Error()
	}
	if st.Err != nil && res.Error == "" {
		res.Error = st.Err.Error()
	}
	// Read to the end, as SDK clients do: closing a body that still holds
	// the last bytes drops the connection, which the router sees as a
	// client disconnect (and then skips its usage check).
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)); err != nil && res.Error == "" {
		res.Error = err.Error()
	}
	res.Complete = res.Done && res.Finish != "" && res.HasUsage && res.TTFTMs >= 0 && res.Error == ""
	return res
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Run sends the plan open-loop: each request at its planned time, whatever
// happened to the earlier ones. Requests still running at the deadline are
// cancelled and count as incomplete; requests not yet sent are not sent.
func (c *Client) Run(ctx context.Context, plan []Request, deadline time.Duration) []Result {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	results := make([]Result, len(plan))
	var wg sync.WaitGroup
	for i, r := range plan {
		if wait := time.Until(start.Add(r.At)); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			results[i] = Result{Index: r.Index, Group: r.Group, TTFTMs: -1, Error: "not sent: run deadline"}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = c.Do(ctx, r, start)
		}()
	}
	wg.Wait()
	return results
}

// RunClosed sends the plan closed-loop: concurrency clients, each sending
// the next request of the plan (in plan order, ignoring the planned times)
// as soon as its previous one ended. Requests still running at the deadline
// are cancelled and count as incomplete; the rest are not sent.
func (c *Client) RunClosed(ctx context.Context, plan []Request, concurrency int, deadline time.Duration) []Result {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	results := make([]Result, len(plan))
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < max(concurrency, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(plan) {
					return
				}
				r := plan[i]
				if ctx.Err() != nil {
					results[i] = Result{Index: r.Index, Group: r.Group, TTFTMs: -1, Error: "not sent: run deadline"}
					continue
				}
				results[i] = c.Do(ctx, r, start)
			}
		}()
	}
	wg.Wait()
	return results
}

// Summary aggregates a run's results.
type Summary struct {
	Requests   int     `json:"requests"`
	Completed  int     `json:"completed"`
	Incomplete int     `json:"incomplete"`
	Non200     int     `json:"non_200"`
	TTFTP50    float64 `json:"ttft_p50_ms"`
	TTFTP90    float64 `json:"ttft_p90_ms"`
	TTFTP99    float64 `json:"ttft_p99_ms"`
	TTFTMean   float64 `json:"ttft_mean_ms"`
	// TTFT medians of the requests the engine served with part of the
	// prompt cached (hit) and with nothing cached (miss).
	TTFTP50Hit      float64 `json:"ttft_p50_hit_ms,omitempty"`
	TTFTP50Miss     float64 `json:"ttft_p50_miss_ms,omitempty"`
	E2EP50          float64 `json:"e2e_p50_ms"`
	E2EP99          float64 `json:"e2e_p99_ms"`
	PromptTokens    int     `json:"prompt_tokens"`
	CachedTokens    int     `json:"cached_tokens"`
	CachedTokenRate float64 `json:"cached_token_rate"`
	// RequestsWithCache counts completed requests the engine served with
	// some of their prompt cached.
	RequestsWithCache int            `json:"requests_with_cache"`
	PerReplica        map[string]int `json:"requests_per_replica"`
	// GroupSplit is, for shared-prefix groups, how many replicas served
	// each group, averaged over groups (1 = perfect affinity).
	GroupSplit float64 `json:"replicas_per_group,omitempty"`
	// GroupHomes counts, per replica, the groups it served most requests
	// of: how the strategy spread the groups' prefixes (and so the cache
	// capacity they need) over the replicas.
	GroupHomes map[string]int `json:"groups_by_main_replica,omitempty"`
	// Misses explains, for shared-prefix requests, why the engine had
	// nothing cached: see Classify.
	Misses    map[string]int `json:"cache_outcomes,omitempty"`
	DurationS float64        `json:"duration_s"`
}

// Summarize computes a Summary. TTFT and end-to-end percentiles are over
// the completed requests.
func Summarize(rs []Result) Summary {
	s := Summary{Requests: len(rs), PerReplica: map[string]int{}}
	var ttft, e2e, hit, miss []float64
	groups := map[int]map[string]int{}
	for _, r := range rs {
		if r.Status != 0 && r.Status != http.StatusOK {
			s.Non200++
		}
		if end := r.SentAtMs + r.E2EMs; end/1000 > s.DurationS {
			s.DurationS = end / 1000
		}
		if !r.Complete {
			s.Incomplete++
			continue
		}
		s.Completed++
		ttft = append(ttft, r.TTFTMs)
		e2e = append(e2e, r.E2EMs)
		if r.CachedTokens > 0 {
			hit = append(hit, r.TTFTMs)
		} else {
			miss = append(miss, r.TTFTMs)
		}
		s.PromptTokens += r.PromptTokens
		s.CachedTokens += r.CachedTokens
		if r.CachedTokens > 0 {
			s.RequestsWithCache++
		}
		if r.Replica != "" {
			s.PerReplica[r.Replica]++
			if r.Group >= 0 {
				if groups[r.Group] == nil {
					groups[r.Group] = map[string]int{}
				}
				groups[r.Group][r.Replica]++
			}
		}
	}
	s.Misses = Classify(rs)
	sort.Float64s(ttft)
	sort.Float64s(e2e)
	sort.Float64s(hit)
	sort.Float64s(miss)
	if len(hit) > 0 {
		s.TTFTP50Hit = stats.Percentile(hit, .5)
	}
	if len(miss) > 0 {
		s.TTFTP50Miss = stats.Percentile(miss, .5)
	}
	if len(ttft) > 0 {
		s.TTFTP50, s.TTFTP90, s.TTFTP99 = stats.Percentile(ttft, .5), stats.Percentile(ttft, .9), stats.Percentile(ttft, .99)
		s.E2EP50, s.E2EP99 = stats.Percentile(e2e, .5), stats.Percentile(e2e, .99)
	}
	for _, v := range ttft {
		s.TTFTMean += v / float64(len(ttft))
	}
	if s.PromptTokens > 0 {
		s.CachedTokenRate = float64(s.CachedTokens) / float64(s.PromptTokens)
	}
	if len(groups) > 0 {
		n := 0
		for _, g := range groups {
			n += len(g)
		}
		s.GroupSplit = float64(n) / float64(len(groups))
		s.GroupHomes = map[string]int{}
		for _, g := range groups {
			best, bestN := "", -1
			for rep, k := range g {
				if k > bestN || (k == bestN && rep < best) {
					best, bestN = rep, k
				}
			}
			s.GroupHomes[best]++
		}
	}
	return s
}

// Classify sorts the completed shared-prefix requests (Group >= 0) of one
// run by what the engine did with their prefix:
//
//	hit               some of the prompt was cached
//	first             the group's first request: nothing to reuse anywhere
//	routed_elsewhere  the group had only been sent to the other replica(s)
//	concurrent        the prefix was in flight on this replica: a busy slot
//	                  held it, or an earlier request of the group was still
//	                  running there (slots are exclusive in llama.cpp)
//	evicted           the group had been served here, and its slot was
//	                  reused for another prompt since (LRU over the slots)
//
// Results of several runs must be classified run by run.
func Classify(rs []Result) map[string]int {
	var done []Result
	for _, r := range rs {
		if r.Complete && r.Group >= 0 {
			done = append(done, r)
		}
	}
	if len(done) == 0 {
		return nil
	}
	sort.Slice(done, func(i, j int) bool { return done[i].SentAtMs < done[j].SentAtMs })
	out := map[string]int{}
	for i, r := range done {
		if r.CachedTokens > 0 {
			out["hit"]++
			continue
		}
		seen, here, running := false, false, false
		for _, e := range done[:i] {
			if e.Group != r.Group {
				continue
			}
			seen = true
			if e.Replica == r.Replica {
				here = true
				if e.SentAtMs+e.E2EMs > r.SentAtMs {
					running = true
				}
			}
		}
		switch {
		case !seen:
			out["first"]++
		case r.BusyReuse > 0 || running:
			out["concurrent"]++
		case !here:
			out["routed_elsewhere"]++
		default:
			out["evicted"]++
		}
	}
	return out
}
