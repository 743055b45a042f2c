// Package trace replays request traces in the Mooncake format (the FAST'25
// trace release: one JSON object per line with timestamp, input_length,
// output_length and hash_ids, one id per 512-token block of the prompt) as
// workloads of the lab: the simulator's (Workload), the end-to-end load
// generator's and the real-engine bench's (Requests).
//
// Each block id becomes a deterministic block of pseudo-English text of a
// fixed token count (the workload package's vocabulary, drawn with an rng
// seeded by the id), ending in a newline so that blocks tokenize piecewise;
// the last block of a prompt is cut to input_length. Two requests whose
// hash_ids start alike therefore share that prefix of text, of engine
// tokens and of router keys. A token scale (Options.BlockTokens) replays
// the trace with fewer tokens per block, for engines that run on CPUs;
// arrivals keep the trace's timing until ScaleRate compresses them to a
// target load.
package trace

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// TraceBlockTokens is the block size of the Mooncake traces in tokens.
const TraceBlockTokens = 512

// Record is one request of a trace.
type Record struct {
	// Timestamp is the arrival in milliseconds from the start.
	Timestamp int64 `json:"timestamp"`
	// InputLength and OutputLength are in tokens.
	InputLength  int `json:"input_length"`
	OutputLength int `json:"output_length"`
	// HashIDs has one id per 512-token block of the prompt, in order; the
	// last block may be partial.
	HashIDs []int64 `json:"hash_ids"`
}

// Read parses a trace, one JSON record per line (blank lines skipped), and
// checks that its lengths agree and its timestamps do not go backwards.
func Read(r io.Reader) ([]Record, error) {
	var out []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(strings.TrimSpace(string(b))) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("trace: line %d: %w", line, err)
		}
		if err := rec.check(); err != nil {
			return nil, fmt.Errorf("trace: line %d: %w", line, err)
		}
		if n := len(out); n > 0 && rec.Timestamp < out[n-1].Timestamp {
			return nil, fmt.Errorf("trace: line %d: timestamp %d before the previous one (%d)", line, rec.Timestamp, out[n-1].Timestamp)
		}
		out = append(out, rec)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("trace: no records")
	}
	return out, nil
}

// Load reads the trace at path.
func Load(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

func (r *Record) check() error {
	n := len(r.HashIDs)
	switch {
	case n == 0 || r.InputLength < 1:
		return fmt.Errorf("empty prompt")
	case r.OutputLength < 0 || r.Timestamp < 0:
		return fmt.Errorf("negative output_length or timestamp")
	case r.InputLength > n*TraceBlockTokens || r.InputLength <= (n-1)*TraceBlockTokens:
		return fmt.Errorf("input_length %d does not fit %d blocks of %d tokens", r.InputLength, n, TraceBlockTokens)
	}
	return nil
}

// Options describe how a trace is replayed.
type Options struct {
	// BlockTokens is the engine tokens of one trace block (512: the
	// trace's own size; default). Fewer scale every prompt and answer by
	// BlockTokens/512, for engines on CPUs. At least 2.
	BlockTokens int `json:"block_tokens"`
	// SystemBlocks is how many leading blocks form the system message;
	// the rest is the user message. 0 (default): the whole prompt is the
	// user message, as the trace gives no roles.
	SystemBlocks int `json:"system_blocks,omitempty"`
	// Requests keeps the first n requests of the trace (a window of its
	// time; 0: all).
	Requests int `json:"requests,omitempty"`
	// Sample, when positive, replays a sample of the (windowed) trace
	// rather than all of it: whole prefix families (the requests whose
	// first block id is the same, the only ones that can share a prefix)
	// drawn at random with Seed until they hold at least Sample requests,
	// in the trace's order and timing. A short replay keeps the trace's
	// reuse that way, where a window of its start has almost none: a
	// conversation's later turns come minutes after its first.
	Sample int `json:"sample,omitempty"`
	// SharedHead opens every request with the same n blocks (ids the trace
	// does not use), the shape of production traces whose requests all
	// start with one system prompt, which the synthetic trace lacks; 0
	// (default): the trace as it is.
	SharedHead int `json:"shared_head,omitempty"`
	// Seed seeds the vocabulary and every block's text.
	Seed uint64 `json:"seed"`
	// Model, Parse and HashBytes are the workload's (workload.Params).
	Model     string               `json:"model,omitempty"`
	Parse     policies.ParseConfig `json:"parse"`
	HashBytes int                  `json:"hash_bytes,omitempty"`
}

func (o Options) withDefaults() Options {
	if o.BlockTokens == 0 {
		o.BlockTokens = TraceBlockTokens
	}
	return o
}

// scale converts trace tokens to engine tokens (at least 1).
func (o Options) scale(traceTokens int) int {
	return max(1, (traceTokens*o.BlockTokens+TraceBlockTokens-1)/TraceBlockTokens)
}

// window returns the records o replays.
func (o Options) window(recs []Record) []Record {
	if o.Requests > 0 && o.Requests < len(recs) {
		recs = recs[:o.Requests]
	}
	if o.Sample > 0 && o.Sample < len(recs) {
		recs = sampleFamilies(recs, o.Sample, o.Seed)
	}
	if o.SharedHead <= 0 {
		return recs
	}
	var top int64
	for _, r := range recs {
		for _, id := range r.HashIDs {
			top = max(top, id)
		}
	}
	out := make([]Record, len(recs))
	for i, r := range recs {
		ids := make([]int64, 0, o.SharedHead+len(r.HashIDs))
		for k := range o.SharedHead {
			ids = append(ids, top+1+int64(k))
		}
		r.HashIDs = append(ids, r.HashIDs...)
		r.InputLength += o.SharedHead * TraceBlockTokens
		out[i] = r
	}
	return out
}

// sampleFamilies keeps the requests of whole prefix families, drawn in a
// seeded random order until they hold at least n requests, in recs' order.
func sampleFamilies(recs []Record, n int, seed uint64) []Record {
	var firsts []int64
	size := map[int64]int{}
	for _, r := range recs {
		id := r.HashIDs[0]
		if size[id] == 0 {
			firsts = append(firsts, id)
		}
		size[id]++
	}
	rng := rand.New(rand.NewPCG(seed, 0x73616d706c65))
	rng.Shuffle(len(firsts), func(i, j int) { firsts[i], firsts[j] = firsts[j], firsts[i] })
	keep := map[int64]bool{}
	for got, k := 0, 0; got < n && k < len(firsts); k++ {
		keep[firsts[k]] = true
		got += size[firsts[k]]
	}
	out := make([]Record, 0, n+n/4)
	for _, r := range recs {
		if keep[r.HashIDs[0]] {
			out = append(out, r)
		}
	}
	return out
}

// block is one block id's text and tokens.
type block struct {
	text   string
	tokens []uint32
}

// texts makes and keeps the text of every block id.
type texts struct {
	src    *workload.TextSource
	seed   uint64
	tokens int
	blocks map[int64]*block
}

func newTexts(o Options) *texts {
	return &texts{src: workload.NewTextSource(o.Seed ^ 0x7472616365), seed: o.Seed, tokens: o.BlockTokens, blocks: map[int64]*block{}}
}

// full returns block id's text: tokens-1 tokens of words and a newline,
// which the tokenizer always makes a token of its own, so the next block
// tokenizes as it would alone.
func (t *texts) full(id int64) *block {
	if b := t.blocks[id]; b != nil {
		return b
	}
	rng := rand.New(rand.NewPCG(t.seed, uint64(id)))
	s := t.src.Text(rng, t.tokens-1) + "\n"
	b := &block{text: s, tokens: simengine.Tokenize(s)}
	t.blocks[id] = b
	return b
}

// cut returns the first n tokens of block id (its text up to the end of
// its n-th token).
func (t *texts) cut(id int64, n int) (string, []uint32) {
	b := t.full(id)
	if n >= len(b.tokens) {
		return b.text, b.tokens
	}
	end, k := 0, 0
	simengine.TokenizeFunc(b.text, func(tok string) {
		if k < n {
			end += len(tok)
		}
		k++
	})
	return b.text[:end], b.tokens[:n]
}

// segment joins blocks ids[lo:hi] of r, the last of the prompt cut to
// input_length.
func (t *texts) segment(r *Record, lo, hi int, o Options) *workload.Segment {
	var sb strings.Builder
	var toks []uint32
	last := len(r.HashIDs) - 1
	for j := lo; j < hi; j++ {
		var s string
		var tk []uint32
		if j == last {
			s, tk = t.cut(r.HashIDs[j], o.scale(r.InputLength-last*TraceBlockTokens))
		} else {
			b := t.full(r.HashIDs[j])
			s, tk = b.text, b.tokens
		}
		sb.WriteString(s)
		toks = append(toks, tk...)
	}
	return &workload.Segment{Text: sb.String(), Tokens: toks}
}

// Workload returns the trace as a workload: one single-turn session per
// record, in the trace's order and timing (Params.Rate is the trace's mean
// arrival rate; ScaleRate compresses it to a target load). progress, when
// not nil, receives a line every 1,000 requests built.
func Workload(recs []Record, o Options, progress io.Writer) (*workload.Workload, error) {
	o = o.withDefaults()
	if o.BlockTokens < 2 || o.BlockTokens > TraceBlockTokens || o.SystemBlocks < 0 {
		return nil, fmt.Errorf("trace: block_tokens %d not in [2, %d] or system_blocks %d < 0", o.BlockTokens, TraceBlockTokens, o.SystemBlocks)
	}
	recs = o.window(recs)
	if len(recs) == 0 {
		return nil, fmt.Errorf("trace: no records")
	}
	t := newTexts(o)
	t0 := recs[0].Timestamp
	sessions := make([]workload.Session, len(recs))
	for i := range recs {
		r := &recs[i]
		if err := r.check(); err != nil {
			return nil, fmt.Errorf("trace: request %d: %w", i, err)
		}
		// At least one block stays in the user message.
		k := min(o.SystemBlocks, len(r.HashIDs)-1)
		s := workload.Session{Arrival: time.Duration(r.Timestamp-t0) * time.Millisecond, Group: int(r.HashIDs[0])}
		if k > 0 {
			s.System = t.segment(r, 0, k, o)
		}
		out := r.OutputLength
		if o.BlockTokens != TraceBlockTokens {
			out = o.scale(out)
		}
		s.Turns = []workload.TurnSpec{{User: t.segment(r, k, len(r.HashIDs), o), Output: max(out, 1)}}
		sessions[i] = s
		if progress != nil && (i+1)%1000 == 0 {
			fmt.Fprintf(progress, "trace: built %d of %d requests (%d distinct blocks)\n", i+1, len(recs), len(t.blocks))
		}
	}
	span := float64(recs[len(recs)-1].Timestamp-t0) / 1000
	rate := float64(len(recs)) / max(span, 1e-3)
	p := workload.Params{Kind: workload.Trace, Requests: len(recs), Rate: rate, Seed: o.Seed, Model: o.Model,
		Parse: o.Parse, HashBytes: o.HashBytes}
	return workload.FromSessions(p, sessions), nil
}

// Arrival is one request of a replayed trace and its arrival time.
type Arrival struct {
	At      time.Duration
	Request *workload.Request
}

// Requests yields w's requests in arrival order (a load generator's view:
// render each with Request.Body), or the error of the first that cannot be
// derived.
func Requests(w *workload.Workload) iter.Seq2[Arrival, error] {
	return func(yield func(Arrival, error) bool) {
		for i := range w.Sessions {
			r, err := w.Request(i, 0)
			if err != nil {
				yield(Arrival{}, err)
				return
			}
			if !yield(Arrival{At: w.Sessions[i].Arrival, Request: r}, nil) {
				return
			}
		}
	}
}

// Stats describe the replayed part of a trace in engine tokens (at the
// replay's scale, without the chat template's few tokens).
type Stats struct {
	Requests int `json:"requests"`
	// Blocks is the number of distinct block ids: the working set is
	// Blocks x BlockTokens tokens.
	Blocks int `json:"distinct_blocks"`
	// Families is the number of distinct first block ids: groups of
	// requests that can share a prefix.
	Families         int     `json:"prefix_families"`
	WorkingSetTokens int64   `json:"working_set_tokens"`
	MeanInputTokens  float64 `json:"mean_input_tokens"`
	MeanOutputTokens float64 `json:"mean_output_tokens"`
	// Bound is the share of input tokens in blocks whose id came earlier:
	// what one unbounded cache shared by every replica would serve, the
	// best any router can do.
	Bound float64 `json:"reusable_share"`
	// SpanS is the trace's own duration in seconds.
	SpanS float64 `json:"span_s"`
}

// Describe returns the statistics of the records o replays.
func Describe(recs []Record, o Options) Stats {
	o = o.withDefaults()
	recs = o.window(recs)
	seen, firsts := map[int64]bool{}, map[int64]bool{}
	var st Stats
	var in, out, reuse int64
	for i := range recs {
		r := &recs[i]
		firsts[r.HashIDs[0]] = true
		last := len(r.HashIDs) - 1
		for j, id := range r.HashIDs {
			n := o.BlockTokens
			if j == last {
				n = o.scale(r.InputLength - last*TraceBlockTokens)
			}
			in += int64(n)
			if seen[id] {
				reuse += int64(n)
			}
		}
		for _, id := range r.HashIDs {
			seen[id] = true
		}
		o2 := r.OutputLength
		if o.BlockTokens != TraceBlockTokens {
			o2 = o.scale(o2)
		}
		out += int64(max(o2, 1))
	}
	st.Requests, st.Blocks, st.Families = len(recs), len(seen), len(firsts)
	st.WorkingSetTokens = int64(len(seen)) * int64(o.BlockTokens)
	if len(recs) > 0 {
		st.MeanInputTokens, st.MeanOutputTokens = float64(in)/float64(len(recs)), float64(out)/float64(len(recs))
		st.SpanS = float64(recs[len(recs)-1].Timestamp-recs[0].Timestamp) / 1000
	}
	if in > 0 {
		st.Bound = float64(reuse) / float64(in)
	}
	return st
}
