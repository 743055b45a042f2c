// Package workload generates the request streams of llmroute's policy
// experiments: shared prefix (after SGLang's generated-shared-prefix
// benchmark), multi-turn chat with growing history, no shared prefix,
// skewed tenants, mixed traffic (unique documents interleaved with shared
// prefixes) and a large deployment's many groups. Every request is an OpenAI chat body, and its prefix keys
// come from policies.Parse on that body, exactly as the Caddy module
// computes them; the engine sees the same messages through the simulated
// replica's chat template.
//
// A workload is a list of sessions with Poisson arrivals. A session is one
// request, or for multi-turn chat several turns, each sent a think time
// after the previous one completed, with the previous answer in its
// history. Answers come from the engine model (they depend only on the
// prompt), so the simulator reports them with SetAnswer as they complete;
// requests are built lazily and memoised, so that every policy run of the
// same workload sees byte-identical requests.
package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// Kinds of workload.
const (
	SharedPrefix   = "shared_prefix"
	MultiTurn      = "multi_turn"
	NoSharedPrefix = "no_shared_prefix"
	Skewed         = "skewed"
	// Mixed interleaves requests that each carry a unique document (as in
	// no_shared_prefix) with shared-prefix requests; UniqueShare is the
	// fraction of unique ones.
	Mixed = "mixed"
	// Large is shared_prefix for a larger deployment: many more groups
	// (the suite runs it on 8 replicas).
	Large = "large"
)

// Kinds lists every workload kind in report order.
var Kinds = []string{SharedPrefix, MultiTurn, NoSharedPrefix, Skewed, Mixed, Large}

// DefaultModel is the model name in every body (simreplica's default).
const DefaultModel = "sim-llama-3.1-8b"

// Params describe a workload. Token counts are engine tokens.
type Params struct {
	Kind string `json:"kind"`
	// Requests is the number of requests (turns, for multi-turn chat).
	Requests int `json:"requests"`
	// Rate is the mean arrival rate in requests (turns) per second.
	Rate float64 `json:"rate_per_s"`
	// Groups is the number of distinct system prompts (groups, tenants
	// or chat applications); unused for no_shared_prefix.
	Groups         int `json:"groups,omitempty"`
	SystemTokens   int `json:"system_tokens"`
	QuestionTokens int `json:"question_tokens,omitempty"`
	OutputTokens   int `json:"output_tokens,omitempty"`
	// ZipfS is the exponent of the tenants' popularity (skewed).
	ZipfS float64 `json:"zipf_s,omitempty"`
	// UniqueShare is the fraction of mixed requests that carry a unique
	// document instead of a group's system prompt, in [0, 1].
	UniqueShare float64 `json:"unique_share,omitempty"`
	// Multi-turn: turns per conversation, user message and answer
	// lengths (uniform in [min, max]), mean think time (exponential).
	TurnsMin  int           `json:"turns_min,omitempty"`
	TurnsMax  int           `json:"turns_max,omitempty"`
	UserMin   int           `json:"user_min,omitempty"`
	UserMax   int           `json:"user_max,omitempty"`
	OutputMin int           `json:"output_min,omitempty"`
	OutputMax int           `json:"output_max,omitempty"`
	Think     time.Duration `json:"think_ns,omitempty"`

	Seed  uint64 `json:"seed"`
	Model string `json:"model"`
	// Parse configures the router's keys (block size, deployment).
	Parse policies.ParseConfig `json:"parse"`
	// HashBytes is how many leading body bytes bounded_hash hashes.
	HashBytes int `json:"hash_bytes"`
}

// Session is one conversation (one request for single-turn workloads).
type Session struct {
	Arrival time.Duration
	Group   int
	System  *Segment
	Turns   []TurnSpec

	answers []*Segment
	reqs    []*Request
}

// TurnSpec is one turn of a session before its history is known.
type TurnSpec struct {
	User   *Segment
	Output int
	// Think is the pause after the previous turn completed (zero for the
	// first turn).
	Think time.Duration
}

// Workload is a generated request stream. Its methods are safe for
// concurrent use by several simulator runs.
type Workload struct {
	Params   Params
	Sessions []Session
	// MeanPromptTokens and MeanOutputTokens describe the requests (over
	// the turns' nominal lengths for multi-turn: answers are known only
	// once generated, so their nominal lengths are used).
	MeanPromptTokens float64
	MeanOutputTokens float64

	mu sync.Mutex
}

// Requests returns the total number of requests (turns).
func (w *Workload) Requests() int {
	n := 0
	for i := range w.Sessions {
		n += len(w.Sessions[i].Turns)
	}
	return n
}

// Request returns turn k of session s, building it on first use. For
// multi-turn chat the answers of turns 0..k-1 must have been set; ok is
// false otherwise.
func (w *Workload) Request(s, k int) (*Request, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ss := &w.Sessions[s]
	if r := ss.reqs[k]; r != nil {
		return r, nil
	}
	msgs := make([]Message, 0, 2+2*k)
	if ss.System != nil {
		msgs = append(msgs, Message{Role: "system", Content: ss.System})
	}
	for j := 0; j < k; j++ {
		if ss.answers[j] == nil {
			return nil, fmt.Errorf("workload: session %d turn %d: answer of turn %d unknown", s, k, j)
		}
		msgs = append(msgs, Message{Role: "user", Content: ss.Turns[j].User}, Message{Role: "assistant", Content: ss.answers[j]})
	}
	msgs = append(msgs, Message{Role: "user", Content: ss.Turns[k].User})
	r := &Request{Session: s, Turn: k, Messages: msgs, OutputTokens: ss.Turns[k].Output}
	// Parse without the lock, so that runs sharing the workload do not
	// wait for each other; if two derive the same request, the first
	// stored wins (they are identical).
	w.mu.Unlock()
	err := r.derive(w.Params.Model, w.Params.Parse, w.Params.HashBytes)
	w.mu.Lock()
	if err != nil {
		return nil, err
	}
	if old := ss.reqs[k]; old != nil {
		return old, nil
	}
	ss.reqs[k] = r
	return r, nil
}

// SetAnswer records the generated tokens of turn k of session s (the text
// of each is engine.TokenText). The first call wins: answers depend only on
// the prompt, so every run produces the same one.
func (w *Workload) SetAnswer(s, k int, tokens []uint32) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ss := &w.Sessions[s]
	if ss.answers[k] != nil {
		return
	}
	var b strings.Builder
	for _, t := range tokens {
		txt, _ := simengine.TokenText(t)
		b.WriteString(txt)
	}
	// Each generated token is a word with its leading space, so the text
	// tokenizes back to the same ids and the next turn can hit the KV of
	// this answer, as on a real engine.
	ss.answers[k] = &Segment{Text: b.String(), Tokens: append([]uint32(nil), tokens...)}
}

// Reset forgets the memoised requests whose keys depend on Parse, keeping
// answers. Callers that change Params.Parse or HashBytes call it.
func (w *Workload) Reset() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := range w.Sessions {
		clear(w.Sessions[i].reqs)
	}
}

// WithParse returns a copy of w that derives keys with another parse
// configuration (and shares the sessions' texts and known answers).
func (w *Workload) WithParse(pc policies.ParseConfig) *Workload {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := &Workload{Params: w.Params, MeanPromptTokens: w.MeanPromptTokens, MeanOutputTokens: w.MeanOutputTokens}
	c.Params.Parse = pc
	c.Sessions = make([]Session, len(w.Sessions))
	for i, s := range w.Sessions {
		s.answers = append([]*Segment(nil), s.answers...)
		s.reqs = make([]*Request, len(s.reqs))
		c.Sessions[i] = s
	}
	return c
}

// Generate builds the workload p describes.
func Generate(p Params) (*Workload, error) {
	if p.Model == "" {
		p.Model = DefaultModel
	}
	if p.HashBytes == 0 {
		p.HashBytes = 256
	}
	if p.Requests < 1 || p.Rate <= 0 {
		return nil, fmt.Errorf("workload: need requests >= 1 and rate > 0, got %d and %v", p.Requests, p.Rate)
	}
	rng := rand.New(rand.NewPCG(p.Seed, 0x776f726b6c6f6164))
	voc := newVocabulary(p.Seed ^ 0x5eed)
	w := &Workload{Params: p}
	switch p.Kind {
	case SharedPrefix, Skewed, Large:
		if p.Groups < 1 {
			return nil, fmt.Errorf("workload: %s needs groups >= 1", p.Kind)
		}
		systems := make([]*Segment, p.Groups)
		for g := range systems {
			systems[g] = NewSegment(voc.text(rng, p.SystemTokens))
		}
		pick := func() int { return rng.IntN(p.Groups) }
		if p.Kind == Skewed {
			z := newZipf(p.Groups, p.ZipfS)
			pick = func() int { return z.sample(rng) }
		}
		t := time.Duration(0)
		for range p.Requests {
			t += expDur(rng, 1/p.Rate)
			g := pick()
			w.add(Session{Arrival: t, Group: g, System: systems[g],
				Turns: []TurnSpec{{User: NewSegment(voc.text(rng, p.QuestionTokens)), Output: p.OutputTokens}}})
		}
	case Mixed:
		if p.Groups < 1 || !(p.UniqueShare >= 0 && p.UniqueShare <= 1) {
			return nil, fmt.Errorf("workload: mixed needs groups >= 1 and unique share in [0, 1], got %d and %v", p.Groups, p.UniqueShare)
		}
		systems := make([]*Segment, p.Groups)
		for g := range systems {
			systems[g] = NewSegment(voc.text(rng, p.SystemTokens))
		}
		t := time.Duration(0)
		for i := range p.Requests {
			t += expDur(rng, 1/p.Rate)
			// Groups are numbered 0..Groups-1; a unique document is a
			// group of its own, numbered past them.
			g, sys := p.Groups+i, (*Segment)(nil)
			if rng.Float64() >= p.UniqueShare {
				g = rng.IntN(p.Groups)
				sys = systems[g]
			} else {
				sys = NewSegment(voc.text(rng, p.SystemTokens))
			}
			w.add(Session{Arrival: t, Group: g, System: sys,
				Turns: []TurnSpec{{User: NewSegment(voc.text(rng, p.QuestionTokens)), Output: p.OutputTokens}}})
		}
	case NoSharedPrefix:
		t := time.Duration(0)
		for i := range p.Requests {
			t += expDur(rng, 1/p.Rate)
			// A unique leading document per request: nothing is shared,
			// not even the first block.
			w.add(Session{Arrival: t, Group: i, System: NewSegment(voc.text(rng, p.SystemTokens)),
				Turns: []TurnSpec{{User: NewSegment(voc.text(rng, p.QuestionTokens)), Output: p.OutputTokens}}})
		}
	case MultiTurn:
		if p.Groups < 1 || p.TurnsMin < 1 || p.TurnsMax < p.TurnsMin || p.UserMin < 1 || p.UserMax < p.UserMin ||
			p.OutputMin < 1 || p.OutputMax < p.OutputMin {
			return nil, fmt.Errorf("workload: multi_turn parameters out of range: %+v", p)
		}
		systems := make([]*Segment, p.Groups)
		for g := range systems {
			systems[g] = NewSegment(voc.text(rng, p.SystemTokens))
		}
		meanTurns := float64(p.TurnsMin+p.TurnsMax) / 2
		sessRate := p.Rate / meanTurns
		t := time.Duration(0)
		for n := 0; n < p.Requests; {
			t += expDur(rng, 1/sessRate)
			turns := p.TurnsMin + rng.IntN(p.TurnsMax-p.TurnsMin+1)
			turns = min(turns, p.Requests-n)
			g := rng.IntN(p.Groups)
			s := Session{Arrival: t, Group: g, System: systems[g]}
			for k := range turns {
				ts := TurnSpec{User: NewSegment(voc.text(rng, p.UserMin+rng.IntN(p.UserMax-p.UserMin+1))),
					Output: p.OutputMin + rng.IntN(p.OutputMax-p.OutputMin+1)}
				if k > 0 {
					ts.Think = expDur(rng, p.Think.Seconds())
				}
				s.Turns = append(s.Turns, ts)
			}
			n += turns
			w.add(s)
		}
	default:
		return nil, fmt.Errorf("workload: unknown kind %q (valid: %s)", p.Kind, strings.Join(Kinds, ", "))
	}
	w.describe()
	return w, nil
}

func (w *Workload) add(s Session) {
	s.answers = make([]*Segment, len(s.Turns))
	s.reqs = make([]*Request, len(s.Turns))
	w.Sessions = append(w.Sessions, s)
}

// describe computes the mean nominal prompt and output lengths.
func (w *Workload) describe() {
	tmpl := func(role string) int { return len(header(role)) + len(newline) }
	var prompt, out, n float64
	for i := range w.Sessions {
		s := &w.Sessions[i]
		hist := float64(len(genPrompt))
		if s.System != nil {
			hist += float64(len(s.System.Tokens) + tmpl("system"))
		}
		for _, t := range s.Turns {
			hist += float64(len(t.User.Tokens) + tmpl("user"))
			prompt += hist
			out += float64(t.Output)
			n++
			hist += float64(t.Output + tmpl("assistant"))
		}
	}
	if n > 0 {
		w.MeanPromptTokens, w.MeanOutputTokens = prompt/n, out/n
	}
}

// expDur draws an exponential duration with the given mean in seconds.
func expDur(rng *rand.Rand, meanSec float64) time.Duration {
	return time.Duration(rng.ExpFloat64() * meanSec * float64(time.Second))
}

// zipf samples ranks 0..n-1 with probability proportional to 1/(k+1)^s.
type zipf struct{ cdf []float64 }

func newZipf(n int, s float64) *zipf {
	z := &zipf{cdf: make([]float64, n)}
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), s)
		z.cdf[k] = sum
	}
	for k := range z.cdf {
		z.cdf[k] /= sum
	}
	return z
}

func (z *zipf) sample(rng *rand.Rand) int {
	u := rng.Float64()
	lo, hi := 0, len(z.cdf)-1
	for lo < hi {
		m := (lo + hi) / 2
		if z.cdf[m] < u {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// ZipfShare returns the traffic share of the top k of n tenants.
func ZipfShare(n int, s float64, k int) float64 {
	z := newZipf(n, s)
	return z.cdf[min(k, n)-1]
}

// ScaleRate changes the arrival rate to rate by rescaling every session's
// arrival time (a Poisson process with its times divided by k is a Poisson
// process k times as fast). Think times do not change. Call it before any
// run.
func (w *Workload) ScaleRate(rate float64) {
	if rate <= 0 || w.Params.Rate <= 0 {
		return
	}
	k := w.Params.Rate / rate
	for i := range w.Sessions {
		w.Sessions[i].Arrival = time.Duration(float64(w.Sessions[i].Arrival) * k)
	}
	w.Params.Rate = rate
}
