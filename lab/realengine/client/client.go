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
	"strings"
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/openai"
	"github.com/llmroute/caddy-llmroute/internal/sse"
	"github.com/llmroute/caddy-llmroute/internal/stats"
)

// Result is what the client saw of one request.
type Result struct {
	Index        int     `json:"index"`
	Group        int     `json:"group"`
	Turn         int     `json:"turn"`
	Prev         int     `json:"prev"` // plan index of the previous turn, -1 none
	SentAtMs     float64 `json:"sent_at_ms"`
	Status       int     `json:"status"`
	Replica      string  `json:"replica,omitempty"`
	TTFTMs       float64 `json:"ttft_ms"` // -1 when no token arrived
	E2EMs        float64 `json:"e2e_ms"`
	Chunks       int     `json:"chunks"`
	PromptTokens int     `json:"prompt_tokens"`
	CachedTokens int     `json:"cached_tokens"`
	// CompletionTokens is usage.completion_tokens: the answer's tokens.
	CompletionTokens int `json:"completion_tokens"`
	// RouterPromptBytes is the size of llmroute's canonical rendering of
	// the request (Client.RouterBytes), 0 when not computed.
	RouterPromptBytes int    `json:"router_prompt_bytes,omitempty"`
	HasUsage          bool   `json:"has_usage"`
	Finish            string `json:"finish_reason,omitempty"`
	Slot              int    `json:"engine_slot"`       // from the replica's x-engine-slot header; -1 unknown
	BusyReuse         int    `json:"engine_busy_reuse"` // tokens a busy slot held for this prompt
	// EngineLCP is the token-exact common prefix of the prompt with the
	// slot that served it, before rounding down to the engine's blocks
	// (-1 unknown).
	EngineLCP int `json:"engine_lcp"`
	// Answer is the text the engine streamed (what a next turn repeats).
	Answer   string `json:"answer,omitempty"`
	Done     bool   `json:"done"`     // saw data: [DONE]
	Complete bool   `json:"complete"` // 200, a finish_reason, [DONE] and usage
	Error    string `json:"error,omitempty"`
}

// Client sends requests to one OpenAI-compatible endpoint.
type Client struct {
	URL           string // e.g. http://127.0.0.1:8480/v1/chat/completions
	Model         string
	MaxTokens     int
	ReplicaHeader string
	HTTP          *http.Client
	// RouterBytes, when set, measures each body as the router renders it
	// (Result.RouterPromptBytes).
	RouterBytes func(body []byte) int
}

type chatReq struct {
	Model         string          `json:"model"`
	Messages      []Message       `json:"messages"`
	MaxTokens     int             `json:"max_tokens"`
	Stream        bool            `json:"stream"`
	StreamOptions map[string]bool `json:"stream_options"`
	IgnoreEOS     bool            `json:"ignore_eos"`
	Temperature   float64         `json:"temperature"`
}

// ChatBody is the body Do sends for r: a streamed chat completion of
// model with r's messages, maxTokens tokens, usage included, EOS ignored.
func ChatBody(model string, maxTokens int, r Request) []byte {
	body, _ := json.Marshal(chatReq{
		Model: model, MaxTokens: maxTokens, Stream: true, IgnoreEOS: true,
		StreamOptions: map[string]bool{"include_usage": true},
		Messages:      r.Messages(),
	})
	return body
}

// Do streams one request and measures it. TTFT is the time from sending to
// the first chunk that carries generated text.
func (c *Client) Do(ctx context.Context, r Request, start time.Time) (res Result) {
	res = Result{Index: r.Index, Group: r.Group, Turn: r.Turn, Prev: r.Prev, TTFTMs: -1, Slot: -1, EngineLCP: -1}
	maxTokens := c.MaxTokens
	if r.MaxTokens > 0 {
		maxTokens = r.MaxTokens
	}
	body := ChatBody(c.Model, maxTokens, r)
	if c.RouterBytes != nil {
		res.RouterPromptBytes = c.RouterBytes(body)
	}
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
		res.Slot, res.BusyReuse, res.EngineLCP = engineSlot(h)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		res.Error = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		return res
	}
	var seen bytes.Buffer
	st := openai.ReadStream(io.TeeReader(resp.Body, &capped{b: &seen, left: 1 << 20}))
	res.Done, res.Chunks, res.Finish = st.Done, st.Chunks, st.Finish
	res.Answer = answerText(seen.Bytes())
	if !st.FirstContent.IsZero() {
		res.TTFTMs = ms(st.FirstContent.Sub(sent))
	}
	if st.Usage != nil {
		res.HasUsage = true
		res.PromptTokens, res.CachedTokens = st.Usage.PromptTokens, st.Usage.Cached()
		res.CompletionTokens = st.Usage.CompletionTokens
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

// engineSlot parses the replica's x-engine-slot header ("slot=N reuse=R
// busy_reuse=B lcp=L", lcp optional): the slot, what a busy slot held, and
// the token-exact common prefix (-1 when absent).
func engineSlot(h string) (slot, busyReuse, lcp int) {
	slot, busyReuse, lcp = -1, 0, -1
	for _, f := range strings.Fields(h) {
		k, v, ok := strings.Cut(f, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil {
			continue
		}
		switch k {
		case "slot":
			slot = n
		case "busy_reuse":
			busyReuse = n
		case "lcp":
			lcp = n
		}
	}
	return slot, busyReuse, lcp
}

// answerText joins the content deltas of the first choice in a stream's
// bytes: the answer as a client assembles it.
func answerText(stream []byte) string {
	var b strings.Builder
	sr := sse.NewReader(bytes.NewReader(stream))
	for {
		data, err := sr.Next()
		if err != nil || sse.IsDone(data) {
			return b.String()
		}
		var c openai.Chunk
		if json.Unmarshal(data, &c) != nil {
			continue
		}
		for _, ch := range c.Choices {
			if ch.Index == 0 {
				b.WriteString(ch.Delta.Content)
			}
		}
	}
}

// capped is a writer that keeps at most left bytes and drops the rest.
type capped struct {
	b    *bytes.Buffer
	left int
}

func (c *capped) Write(p []byte) (int, error) {
	if k := min(len(p), c.left); k > 0 {
		c.b.Write(p[:k])
		c.left -= k
	}
	return len(p), nil
}

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
// the first request of the plan not yet sent whose previous turn (Prev) has
// ended, as soon as its own previous request ended; planned times are
// ignored. A turn is sent with its conversation's History, the answers the
// engine streamed included. Requests still running at the deadline are
// cancelled and count as incomplete; the rest are not sent.
func (c *Client) RunClosed(ctx context.Context, plan []Request, concurrency int, deadline time.Duration) []Result {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	results := make([]Result, len(plan))
	s := newScheduler(plan)
	stop := context.AfterFunc(ctx, s.wake)
	defer stop()
	var wg sync.WaitGroup
	for w := 0; w < max(concurrency, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r, ok := s.next(ctx)
				if !ok {
					return
				}
				res := c.Do(ctx, r, start)
				results[r.Index] = res
				s.done(r, res.Answer)
			}
		}()
	}
	wg.Wait()
	for i, r := range plan {
		if !s.sent[i] {
			results[i] = Result{Index: r.Index, Group: r.Group, Turn: r.Turn, Prev: r.Prev, TTFTMs: -1, Slot: -1, EngineLCP: -1,
				Error: "not sent: run deadline"}
		}
	}
	return results
}

// scheduler hands out a plan's requests in order, each once its previous
// turn has ended. Request i must have Index i.
type scheduler struct {
	mu    sync.Mutex
	plan  []Request
	sent  []bool
	ended []bool
	// history[i] is what request i's next turn repeats: i's History plus
	// its question and answer (set when i ends).
	history [][]Exchange
	first   int           // lowest index not yet sent
	changed chan struct{} // closed and replaced whenever a request ends
}

func newScheduler(plan []Request) *scheduler {
	return &scheduler{plan: plan, sent: make([]bool, len(plan)), ended: make([]bool, len(plan)),
		history: make([][]Exchange, len(plan)), changed: make(chan struct{})}
}

// next returns the first unsent request that may go now, waiting while
// every unsent one waits for a turn in flight; false when none is left or
// ctx ended.
func (s *scheduler) next(ctx context.Context) (Request, bool) {
	for {
		s.mu.Lock()
		for s.first < len(s.plan) && s.sent[s.first] {
			s.first++
		}
		if s.first == len(s.plan) || ctx.Err() != nil {
			s.mu.Unlock()
			return Request{}, false
		}
		for i := s.first; i < len(s.plan); i++ {
			r := s.plan[i]
			if s.sent[i] || (r.Prev >= 0 && !s.ended[r.Prev]) {
				continue
			}
			s.sent[i] = true
			if r.Prev >= 0 {
				r.History = s.history[r.Prev]
			}
			s.mu.Unlock()
			return r, true
		}
		ch := s.changed
		s.mu.Unlock()
		<-ch
	}
}

// done records that r ended with answer and wakes waiting clients.
func (s *scheduler) done(r Request, answer string) {
	s.mu.Lock()
	h := append(append([]Exchange(nil), r.History...), Exchange{User: r.User, Assistant: answer})
	s.history[r.Index], s.ended[r.Index] = h, true
	s.mu.Unlock()
	s.wake()
}

// wake wakes every client waiting in next.
func (s *scheduler) wake() {
	s.mu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
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
	// RouterBytesPerToken is the router's canonical prompt bytes over the
	// engine's prompt tokens (llmroute assumes policies.BytesPerToken).
	RouterBytesPerToken float64 `json:"router_bytes_per_engine_token,omitempty"`
	// Answers is, in multi-turn conversations, how much of each earlier
	// answer the engine reused; nil outside them.
	Answers *AnswerReuse `json:"answer_reuse,omitempty"`
}

// AnswerReuse measures the answers repeated in multi-turn prompts: the
// engine's slot holds what it generated, the next turn repeats the answer
// as text, and only tokens that re-tokenize the same are reused.
type AnswerReuse struct {
	// Turns counts later turns served by a slot that still held their
	// whole previous prompt (EngineLCP >= its prompt tokens); Elsewhere
	// the rest (another replica, or the slot was reused).
	Turns     int `json:"turns"`
	Elsewhere int `json:"elsewhere"`
	// AnswerTokens sums the previous answers' tokens over Turns, and
	// Reused the tokens past the previous prompt the engine matched token
	// for token (at most the answer).
	AnswerTokens int     `json:"answer_tokens"`
	Reused       int     `json:"reused_tokens"`
	Rate         float64 `json:"reused_rate"`
}

// AnswerReuseOf computes AnswerReuse over one run's results, indexed by
// plan index (as RunClosed returns them); nil when no result has a
// previous turn.
func AnswerReuseOf(rs []Result) *AnswerReuse {
	var a *AnswerReuse
	for _, r := range rs {
		if r.Prev < 0 || r.Prev >= len(rs) {
			continue
		}
		if a == nil {
			a = &AnswerReuse{}
		}
		p := rs[r.Prev]
		if !r.Complete || !p.Complete || r.EngineLCP < 0 {
			continue
		}
		if r.EngineLCP < p.PromptTokens {
			a.Elsewhere++
			continue
		}
		a.Turns++
		a.AnswerTokens += p.CompletionTokens
		a.Reused += min(r.EngineLCP-p.PromptTokens, p.CompletionTokens)
	}
	if a != nil && a.AnswerTokens > 0 {
		a.Rate = float64(a.Reused) / float64(a.AnswerTokens)
	}
	return a
}

// Add accumulates o into a (for pooling runs).
func (a *AnswerReuse) Add(o *AnswerReuse) {
	if o == nil {
		return
	}
	a.Turns += o.Turns
	a.Elsewhere += o.Elsewhere
	a.AnswerTokens += o.AnswerTokens
	a.Reused += o.Reused
	a.Rate = 0
	if a.AnswerTokens > 0 {
		a.Rate = float64(a.Reused) / float64(a.AnswerTokens)
	}
}

// Summarize computes a Summary. TTFT and end-to-end percentiles are over
// the completed requests. Misses (Classify) and Answers (AnswerReuseOf)
// read send order and plan indexes: summarize one run's results for them.
func Summarize(rs []Result) Summary {
	s := Summary{Requests: len(rs), PerReplica: map[string]int{}}
	var ttft, e2e, hit, miss []float64
	routerBytes := 0
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
		routerBytes += r.RouterPromptBytes
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
		s.RouterBytesPerToken = float64(routerBytes) / float64(s.PromptTokens)
	}
	s.Answers = AnswerReuseOf(rs)
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
