package workload

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/llmroute/caddy-llmroute/simreplica"
)

func TestTextTokenCountIsExact(t *testing.T) {
	v := newVocabulary(1)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 7, 128, 2048} {
		s := v.text(rng, n)
		if got := len(simengine.Tokenize(s)); got != n {
			t.Fatalf("text(%d) has %d tokens", n, got)
		}
	}
}

func TestTemplateTokensPiecewise(t *testing.T) {
	v := newVocabulary(2)
	rng := rand.New(rand.NewPCG(3, 4))
	ans := " the cache route"
	r := &Request{Messages: []Message{
		{Role: "system", Content: NewSegment(v.text(rng, 300))},
		{Role: "user", Content: NewSegment(v.text(rng, 40))},
		{Role: "assistant", Content: NewSegment(ans)},
		{Role: "user", Content: NewSegment(v.text(rng, 40) + " ")},
	}}
	want := simengine.Tokenize(EngineText(r.Messages))
	got := r.Tokens(nil)
	if !slices.Equal(got, want) {
		t.Fatalf("piecewise tokens differ: %d vs %d", len(got), len(want))
	}
	if r.countTokens() != len(want) {
		t.Fatalf("countTokens %d, want %d", r.countTokens(), len(want))
	}
}

func TestGenerateSharedPrefix(t *testing.T) {
	w, err := Generate(Params{Kind: SharedPrefix, Requests: 200, Rate: 10, Groups: 4, SystemTokens: 512, QuestionTokens: 64, OutputTokens: 16, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := w.Request(0, 0)
	var other *Request
	for i := 1; i < len(w.Sessions); i++ {
		if w.Sessions[i].Group == w.Sessions[0].Group {
			other, _ = w.Request(i, 0)
			break
		}
	}
	if a.Keys.Leading == 0 || other.Keys.Leading != a.Keys.Leading || a.Keys.Blocks[0] != other.Keys.Blocks[0] {
		t.Fatalf("same group, different keys")
	}
	if a.HashKey != other.HashKey {
		t.Fatalf("same group, different hash keys")
	}
	last := w.Sessions[len(w.Sessions)-1].Arrival
	if last < 10*time.Second || last > 40*time.Second {
		t.Fatalf("200 requests at 10/s ended at %v", last)
	}
}

// TestTemplateMatchesReplica checks that the simulator tokenizes a request
// exactly as the simulated replica does (its chat template and tokenizer).
func TestTemplateMatchesReplica(t *testing.T) {
	srv, err := simreplica.New(simreplica.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	w, err := Generate(Params{Kind: MultiTurn, Requests: 4, Rate: 1, Groups: 1, SystemTokens: 100, TurnsMin: 2, TurnsMax: 2,
		UserMin: 10, UserMax: 20, OutputMin: 5, OutputMax: 5, Think: time.Second, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	w.SetAnswer(0, 0, simengine.Tokenize(" the cache route model"))
	for k := range 2 {
		r, err := w.Request(0, k)
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/sim/cached", bytes.NewReader(r.Body(DefaultModel))))
		var got struct {
			PromptTokens int `json:"prompt_tokens"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("turn %d: %v: %s", k, err, rec.Body.String())
		}
		if got.PromptTokens != r.PromptTokens || r.PromptTokens != len(r.Tokens(nil)) {
			t.Fatalf("turn %d: replica counts %d prompt tokens, simulator %d", k, got.PromptTokens, r.PromptTokens)
		}
	}
}

// TestGenerateMixed checks the mixed workload's unique share and that its
// shared requests share their group's system prompt while unique ones
// share nothing, at the sweep's ends too.
func TestGenerateMixed(t *testing.T) {
	for _, share := range []float64{0, 0.3, 1} {
		w, err := Generate(Params{Kind: Mixed, Requests: 1000, Rate: 10, Groups: 8, SystemTokens: 128, QuestionTokens: 16, OutputTokens: 8,
			UniqueShare: share, Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		unique, leading := 0, map[uint64]int{}
		for i := range w.Sessions {
			r, err := w.Request(i, 0)
			if err != nil {
				t.Fatal(err)
			}
			if w.Sessions[i].Group >= 8 {
				unique++
			}
			leading[r.Keys.Leading]++
		}
		got := float64(unique) / 1000
		if got < share-0.05 || got > share+0.05 {
			t.Errorf("share %v: %v unique", share, got)
		}
		// Distinct leading keys: one per group used plus one per unique request.
		groups := len(leading) - unique
		if share < 1 && groups != 8 || share == 1 && groups != 0 {
			t.Errorf("share %v: %d distinct leading keys for %d unique requests", share, len(leading), unique)
		}
	}
	if _, err := Generate(Params{Kind: Mixed, Requests: 10, Rate: 1, Groups: 8, SystemTokens: 16, UniqueShare: 1.5}); err == nil {
		t.Error("unique share 1.5 accepted")
	}
}

// TestGenerateLarge: large is shared_prefix's shape, its groups as given.
func TestGenerateLarge(t *testing.T) {
	w, err := Generate(Params{Kind: Large, Requests: 2000, Rate: 10, Groups: 256, SystemTokens: 64, QuestionTokens: 8, OutputTokens: 8, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	groups := map[int]bool{}
	for _, s := range w.Sessions {
		groups[s.Group] = true
	}
	if len(groups) < 240 {
		t.Errorf("%d of 256 groups used by 2000 requests", len(groups))
	}
}
