package trace

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// small is a trace of five requests: 0 and 1 share their first two blocks,
// 2 is request 0 followed by a longer turn, 3 shares nothing, 4 repeats
// request 3's first block as its partial last one.
const small = `{"timestamp": 0, "input_length": 1300, "output_length": 10, "hash_ids": [1, 2, 3]}
{"timestamp": 500, "input_length": 1100, "output_length": 20, "hash_ids": [1, 2, 4]}

{"timestamp": 1500, "input_length": 2000, "output_length": 30, "hash_ids": [1, 2, 3, 5]}
{"timestamp": 1500, "input_length": 600, "output_length": 0, "hash_ids": [6, 7]}
{"timestamp": 2000, "input_length": 100, "output_length": 5, "hash_ids": [6]}
`

func readSmall(t *testing.T) []Record {
	t.Helper()
	recs, err := Read(strings.NewReader(small))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		t.Fatalf("read %d records, want 5", len(recs))
	}
	return recs
}

func TestReadRejectsBadTraces(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"not json", `{"timestamp": 0,`, "line 1"},
		{"too long for its blocks", `{"timestamp": 0, "input_length": 1100, "output_length": 1, "hash_ids": [1, 2]}`, "does not fit"},
		{"too short for its blocks", `{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1, 2]}`, "does not fit"},
		{"no blocks", `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": []}`, "empty prompt"},
		{"time goes back", "{\"timestamp\": 5, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n" +
			`{"timestamp": 4, "input_length": 10, "output_length": 1, "hash_ids": [2]}`, "line 2: timestamp 4"},
		{"empty", "\n\n", "no records"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// engineTokens is the prompt's length in engine tokens without the chat
// template.
func userTokens(r *workload.Request) int {
	n := 0
	for _, m := range r.Messages {
		n += len(m.Content.Tokens)
	}
	return n
}

func TestWorkloadLengthsAndArrivals(t *testing.T) {
	recs := readSmall(t)
	cases := []struct {
		blockTokens int
		wantIn      []int
		wantOut     []int
	}{
		// The trace's own size: 2 full blocks + 276 tokens, ...
		{512, []int{1300, 1100, 2000, 600, 100}, []int{10, 20, 30, 1, 5}},
		// 512 -> 64: every length divided by 8, rounded up.
		{64, []int{64*2 + 35, 64*2 + 10, 64*3 + 58, 64 + 11, 13}, []int{2, 3, 4, 1, 1}},
	}
	for _, c := range cases {
		w, err := Workload(recs, Options{BlockTokens: c.blockTokens, Seed: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if w.Params.Kind != workload.Trace || len(w.Sessions) != 5 {
			t.Fatalf("kind %q, %d sessions", w.Params.Kind, len(w.Sessions))
		}
		for i := range w.Sessions {
			r, err := w.Request(i, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := userTokens(r); got != c.wantIn[i] {
				t.Errorf("block_tokens %d request %d: %d prompt tokens, want %d", c.blockTokens, i, got, c.wantIn[i])
			}
			if r.OutputTokens != c.wantOut[i] {
				t.Errorf("block_tokens %d request %d: output %d, want %d", c.blockTokens, i, r.OutputTokens, c.wantOut[i])
			}
			// The tokens kept are the text's: the engine sees what the
			// lengths say.
			for _, m := range r.Messages {
				if !slices.Equal(simengine.Tokenize(m.Content.Text), m.Content.Tokens) {
					t.Errorf("block_tokens %d request %d: %s text does not tokenize to its tokens", c.blockTokens, i, m.Role)
				}
			}
			if !slices.Equal(simengine.Tokenize(workload.EngineText(r.Messages)), r.Tokens(nil)) {
				t.Errorf("block_tokens %d request %d: rendering does not tokenize piecewise", c.blockTokens, i)
			}
		}
		wantAt := []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond, 1500 * time.Millisecond, 2 * time.Second}
		for i, s := range w.Sessions {
			if s.Arrival != wantAt[i] {
				t.Errorf("arrival %d at %v, want %v", i, s.Arrival, wantAt[i])
			}
		}
		if w.Params.Rate != 2.5 { // 5 requests over 2 s
			t.Errorf("rate %v, want 2.5", w.Params.Rate)
		}
		w.ScaleRate(25)
		if w.Sessions[4].Arrival != 200*time.Millisecond {
			t.Errorf("compressed tenfold, the last arrival is at %v, want 200ms", w.Sessions[4].Arrival)
		}
	}
}

func TestSameBlockIDSameText(t *testing.T) {
	recs := readSmall(t)
	o := Options{BlockTokens: 64, Seed: 3}
	a, err := Workload(recs, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Built in another order (blocks first seen elsewhere), the texts are
	// the same.
	rev := slices.Clone(recs)
	slices.Reverse(rev)
	for i := range rev {
		rev[i].Timestamp = int64(i)
	}
	b, err := Workload(rev, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		ra, _ := a.Request(i, 0)
		rb, _ := b.Request(len(recs)-1-i, 0)
		if ra.Messages[0].Content.Text != rb.Messages[0].Content.Text {
			t.Fatalf("request %d: text depends on the order blocks were first seen", i)
		}
	}
	text := func(i int) string { r, _ := a.Request(i, 0); return r.Messages[0].Content.Text }
	blockBytes := len(newTexts(o.withDefaults()).full(1).text)
	// Requests 0 and 2 share blocks 1, 2, 3 (request 0's last is cut);
	// 0 and 1 share blocks 1 and 2 and then differ; request 4's partial
	// block 6 is the start of request 3's full block 6.
	checks := []struct {
		i, j     int
		shared   int // bytes at least
		diverges bool
	}{
		{0, 2, len(text(0)), false},
		{0, 1, 2 * blockBytes, true},
		{3, 4, len(text(4)), false},
		{0, 3, 0, true},
	}
	accepted := 0
	for _, c := range checks {
		x, y := text(c.i), text(c.j)
		n := commonPrefix(x, y)
		if n < c.shared {
			t.Errorf("requests %d and %d share %d bytes, want at least %d", c.i, c.j, n, c.shared)
		}
		if c.diverges && n >= min(len(x), len(y)) {
			t.Errorf("requests %d and %d should differ after %d bytes", c.i, c.j, n)
		}
		// A block ends in a newline, so the shared part of two prompts
		// that share whole blocks ends on a block boundary.
		if c.diverges && c.shared > 0 && n > c.shared+blockBytes {
			t.Errorf("requests %d and %d share %d bytes, more than their %d shared blocks", c.i, c.j, n, c.shared/blockBytes)
		}
		accepted++
	}
	if accepted != len(checks) {
		t.Fatalf("checked %d pairs", accepted)
	}
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestSharedBlocksGiveSharedKeys(t *testing.T) {
	recs := readSmall(t)
	pc := policies.ParseConfig{Deployment: "t", BlockSize: 128, MaxBlocks: 4096}
	for _, sys := range []int{0, 1} {
		w, err := Workload(recs, Options{BlockTokens: 128, SystemBlocks: sys, Seed: 2, Parse: pc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		keys := func(i int) policies.Keys {
			r, err := w.Request(i, 0)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Keys.Blocks) == 0 {
				t.Fatalf("request %d has no keys (%s)", i, r.NoPrefix)
			}
			return r.Keys
		}
		shared := func(a, b policies.Keys) int {
			n := 0
			for n < len(a.Blocks) && n < len(b.Blocks) && a.Blocks[n] == b.Blocks[n] {
				n++
			}
			return n
		}
		k0, k1, k2, k3 := keys(0), keys(1), keys(2), keys(3)
		// Request 2 extends request 0: every key of 0 is a key of 2 but
		// perhaps the last, whose block may take in what the rendering
		// puts after the message.
		if n := shared(k0, k2); n < len(k0.Blocks)-1 {
			t.Errorf("system_blocks %d: request 2 shares %d of request 0's %d keys", sys, n, len(k0.Blocks))
		}
		// Requests 0 and 1 share two blocks of 128 tokens (at least
		// 128*2*4 bytes, so several 128-byte keys), then differ.
		n01 := shared(k0, k1)
		if n01 < 4 || n01 >= min(len(k0.Blocks), len(k1.Blocks)) {
			t.Errorf("system_blocks %d: requests 0 and 1 share %d keys of %d and %d", sys, n01, len(k0.Blocks), len(k1.Blocks))
		}
		// Request 3 shares no block with request 0.
		if n := shared(k0, k3); n != 0 {
			t.Errorf("system_blocks %d: requests 0 and 3 share %d keys", sys, n)
		}
		// With a system message, the leading key is the first block's:
		// equal for 0 and 1, different for 3; without one, every
		// request has the same leading key.
		if (k0.Leading == k1.Leading) != true || (k0.Leading == k3.Leading) != (sys == 0) {
			t.Errorf("system_blocks %d: leading keys 0=%x 1=%x 3=%x", sys, k0.Leading, k1.Leading, k3.Leading)
		}
	}
}

func TestDescribeBound(t *testing.T) {
	recs := readSmall(t)
	st := Describe(recs, Options{})
	// Reused: request 1's blocks 1, 2 (1024); request 2's blocks 1, 2, 3
	// (1536); request 4's block 6 (100). Inputs sum to 5100.
	if want := float64(1024+1536+100) / 5100; st.Bound != want {
		t.Errorf("bound %v, want %v", st.Bound, want)
	}
	if st.Blocks != 7 || st.Families != 2 || st.WorkingSetTokens != 7*512 || st.Requests != 5 || st.SpanS != 2 {
		t.Errorf("stats %+v", st)
	}
	// The first two requests only: block 1 and 2 reused by request 1.
	if st := Describe(recs, Options{Requests: 2}); st.Bound != 1024.0/2400 || st.Blocks != 4 {
		t.Errorf("window of two: %+v", st)
	}
}

func TestRequestsYieldsInOrderAndStops(t *testing.T) {
	w, err := Workload(readSmall(t), Options{BlockTokens: 16, Seed: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var at []time.Duration
	for a, err := range Requests(w) {
		if err != nil {
			t.Fatal(err)
		}
		if a.Request == nil || len(a.Request.Body(w.Params.Model)) == 0 {
			t.Fatal("request without a body")
		}
		at = append(at, a.At)
		if len(at) == 3 {
			break
		}
	}
	if !slices.Equal(at, []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond}) {
		t.Fatalf("arrivals %v", at)
	}
}

// givenTrace reads the shared trace, which lives beside the checkout
// (lab/ -> ../../shared/traces), or skips the test when it is not there.
func givenTrace(t *testing.T) []Record {
	t.Helper()
	path := "../../../../shared/traces/mooncake_synthetic_trace.jsonl"
	if _, err := os.Stat(path); err != nil {
		t.Skip("trace not present")
	}
	recs, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// TestGivenTrace reads the shared trace when it is there and checks its
// README's figures: 3,993 requests, 65.1% reusable.
func TestGivenTrace(t *testing.T) {
	st := Describe(givenTrace(t), Options{})
	if st.Requests != 3993 || st.Bound < 0.6505 || st.Bound > 0.6515 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSharedHead: every request opens with the same new blocks, its length
// grows by them, the window applies first, and the records given are
// left as they were.
func TestSharedHead(t *testing.T) {
	recs := readSmall(t)
	got := Options{SharedHead: 2, Requests: 4}.window(recs)
	if len(got) != 4 {
		t.Fatalf("%d records, want the window's 4", len(got))
	}
	for i, r := range got {
		if !slices.Equal(r.HashIDs[:2], []int64{8, 9}) || !slices.Equal(r.HashIDs[2:], recs[i].HashIDs) {
			t.Errorf("request %d: ids %v, want [8 9] then %v", i, r.HashIDs, recs[i].HashIDs)
		}
		if r.InputLength != recs[i].InputLength+2*TraceBlockTokens {
			t.Errorf("request %d: input_length %d, want %d", i, r.InputLength, recs[i].InputLength+2*TraceBlockTokens)
		}
		if err := r.check(); err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	if !slices.Equal(readSmall(t)[0].HashIDs, recs[0].HashIDs) {
		t.Error("the records given were changed")
	}
	// Requests 0 and 3 share no block; with the shared head they share
	// its keys (a 128-token block: several 128-byte keys), then differ.
	pc := policies.ParseConfig{Deployment: "t", BlockSize: 128, MaxBlocks: 4096}
	w, err := Workload(recs, Options{BlockTokens: 128, SharedHead: 1, Seed: 2, Parse: pc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r0, err := w.Request(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	r3, err := w.Request(3, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < len(r0.Keys.Blocks) && n < len(r3.Keys.Blocks) && r0.Keys.Blocks[n] == r3.Keys.Blocks[n] {
		n++
	}
	if n < 4 || n >= min(len(r0.Keys.Blocks), len(r3.Keys.Blocks)) {
		t.Errorf("with a shared head, requests 0 and 3 share %d keys of %d and %d", n, len(r0.Keys.Blocks), len(r3.Keys.Blocks))
	}
}

// TestSampleKeepsWholeFamilies: a sample holds every request of each
// family it draws (and none of the others), in the trace's order, at
// least the requests asked for, differs across seeds, and keeps the
// given trace's reuse where its start has almost none.
func TestSampleKeepsWholeFamilies(t *testing.T) {
	recs := readSmall(t)
	got := Options{Sample: 1, Seed: 3}.window(recs)
	fam := got[0].HashIDs[0]
	want := 0
	for _, r := range recs {
		if r.HashIDs[0] == fam {
			want++
		}
	}
	if len(got) != want {
		t.Fatalf("sample of family %d: %d requests, want all %d", fam, len(got), want)
	}
	for i := 1; i < len(got); i++ {
		if got[i].HashIDs[0] != fam || got[i].Timestamp < got[i-1].Timestamp {
			t.Fatalf("request %d of the sample: %+v", i, got[i])
		}
	}
	if n := len(Options{Sample: 5}.window(recs)); n != 5 {
		t.Errorf("a sample of all: %d requests", n)
	}

	all := givenTrace(t)
	start := Describe(all, Options{Requests: 200})
	firsts := map[int64]bool{}
	for seed := range uint64(3) {
		o := Options{Sample: 200, Seed: seed + 1}
		st := Describe(all, o)
		if st.Requests < 200 || st.Requests > 260 {
			t.Errorf("seed %d: %d requests, want 200 to 260", seed+1, st.Requests)
		}
		// The whole trace's bound is 0.651; its first 200 requests' 0.06.
		if st.Bound < 0.4 || st.Bound < 4*start.Bound {
			t.Errorf("seed %d: bound %.3f (the start's %.3f)", seed+1, st.Bound, start.Bound)
		}
		firsts[o.window(all)[0].HashIDs[0]] = true
	}
	if len(firsts) < 2 {
		t.Error("every seed drew the same first family")
	}
}
