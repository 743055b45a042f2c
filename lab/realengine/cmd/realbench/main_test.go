package main

import (
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
)

func TestParseEngines(t *testing.T) {
	es, err := parseEngines("byte=out/tiny.gguf:plain, bpe=/abs/q:3.gguf:model")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 2 || es[0] != (engineSpec{"byte", "out/tiny.gguf", "plain"}) || es[1] != (engineSpec{"bpe", "/abs/q:3.gguf", "model"}) {
		t.Fatalf("engines %+v", es)
	}
	for _, bad := range []string{"", "byte", "byte=x.gguf", "byte=x.gguf:jinja", "=x.gguf:plain", "a=x:plain,a=y:model", "a=:plain"} {
		if _, err := parseEngines(bad); err == nil {
			t.Errorf("parseEngines(%q) accepted", bad)
		}
	}
}

func TestRouterBytes(t *testing.T) {
	r := client.Request{System: strings.Repeat("s", 300), User: "q?", Prev: -1}
	n := routerBytes(client.ChatBody("tiny", 8, r))
	// The canonical rendering holds both texts and their role headers.
	if n < 302 || n > 302+64 {
		t.Fatalf("router bytes %d for 302 bytes of text", n)
	}
	if routerBytes([]byte("not json")) != 0 {
		t.Fatal("a body that does not parse has a size")
	}
}

// TestMarkdownTables renders a result with two seeds: the pooled row, one
// row per seed, the answer-reuse rows and the outcome rows all appear.
func TestMarkdownTables(t *testing.T) {
	pr := &PolicyResult{
		Summary: client.Summary{Requests: 4, Completed: 4, TTFTP50: 50, CachedTokenRate: 0.5,
			Answers: &client.AnswerReuse{Turns: 2, AnswerTokens: 48, Reused: 46, Rate: 46.0 / 48},
			Misses:  map[string]int{"hit": 3, "first": 1}},
		Router: client.Prediction{Hits: 3, Misses: 1, Precision: 0.75, PredictedOverReported: 1.1},
		Runs: []RunSummary{
			{Seed: 1, TTFTP50: 40, Hits: 2, Precision: 1, GroupSplit: 1, GroupHomes: map[string]int{"replica-a": 2, "replica-b": 1},
				LoadEnd: "2.50 2.00 1.00", Answers: &client.AnswerReuse{Turns: 1, AnswerTokens: 24, Reused: 23, Rate: 23.0 / 24}},
			{Seed: 2, TTFTP50: 60, Hits: 1, Misses: 1, Precision: 0.5},
		},
	}
	out := Output{
		Config:  config{Engines: []engineSpec{{Name: "bpe"}}, Workloads: []string{client.MultiTurn}, Policies: []string{"prefix_load"}},
		Engines: map[string]*EngineResult{"bpe": {Workloads: map[string]map[string]*PolicyResult{client.MultiTurn: {"prefix_load": pr}}}},
	}
	md := markdownTables(out)
	for _, want := range []string{
		"| bpe | multi_turn | prefix_load | 50 ms |",
		"| bpe | multi_turn | prefix_load | 1 | 40 ms |",
		"| bpe | multi_turn | prefix_load | 2 | 60 ms |",
		"| 0.75 (3/1/0/0) | 1.10 |",
		"| 2/1 | 2.50 |",
		"| bpe | prefix_load | 1 | 1 | 0 | 23 of 24 (0.96) |",
		"| bpe | prefix_load | pooled | 2 | 0 | 46 of 48 (0.96) |",
		"| bpe | multi_turn | prefix_load | 3 | 1 | 0 | 0 | 0 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("tables lack %q:\n%s", want, md)
		}
	}
}
