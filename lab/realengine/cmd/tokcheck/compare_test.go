package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/realengine/client"
	"github.com/llmroute/caddy-llmroute/policies"
)

func TestFirstDiffAndReusable(t *testing.T) {
	for _, tc := range []struct {
		a, b []int
		want int
	}{
		{[]int{1, 2, 3}, []int{1, 2, 3}, -1},
		{[]int{1, 2, 3}, []int{1, 2, 4}, 2},
		{[]int{1, 2}, []int{1, 2, 3}, 2},
		{nil, []int{1}, 0},
		{nil, nil, -1},
	} {
		if got := firstDiff(tc.a, tc.b); got != tc.want {
			t.Errorf("firstDiff(%v, %v) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	for _, tc := range []struct{ lcp, prompt, want int }{
		{100, 200, 96}, {15, 200, 0}, {200, 200, 192}, {208, 208, 207}, {48, 48, 47}, {0, 0, 0},
	} {
		if got := reusable(tc.lcp, tc.prompt, 16); got != tc.want {
			t.Errorf("reusable(%d, %d) = %d, want %d", tc.lcp, tc.prompt, got, tc.want)
		}
	}
}

func TestVerdict(t *testing.T) {
	// 128-byte blocks at 4 bytes a token: slack 16 + 32 = 48 tokens.
	for _, tc := range []struct {
		pred, reuse int
		want        string
	}{
		{400, 400, verdictAgree},
		{448, 400, verdictAgree},
		{449, 400, verdictOver},
		{352, 400, verdictAgree},
		{351, 400, verdictSplit},
		{0, 16, verdictSplit},
		{15, 0, verdictFalse},
		{0, 0, verdictAgree},
	} {
		if got := verdict(tc.pred, tc.reuse, 128, 4000, 1000); got != tc.want {
			t.Errorf("verdict(%d, %d) = %q, want %q", tc.pred, tc.reuse, got, tc.want)
		}
	}
}

func TestJudge(t *testing.T) {
	cases := []textCase{{Name: "same", Text: "x"}, {Name: "differs", Text: "y"}, {Name: "known", Text: "z", Known: "why"}, {Name: "empty_ref", Text: "w"}}
	var got engineOut
	for _, p := range [][2][]int{{{1, 2}, {1, 2}}, {{1, 2}, {1, 3}}, {{5}, {6}}, {{7}, nil}} {
		got.Texts = append(got.Texts, struct {
			Llama []int `json:"llama"`
			Ref   []int `json:"ref"`
		}{p[0], p[1]})
	}
	vs, failed, err := judgeTexts(cases, got)
	if err != nil {
		t.Fatal(err)
	}
	if failed != 2 || !vs[0].Match || vs[1].Match || vs[1].FirstDiff != 1 || vs[2].Match || vs[3].Match {
		t.Fatalf("failed %d, verdicts %+v", failed, vs)
	}
	if _, _, err := judgeTexts(cases[:1], got); err == nil {
		t.Fatal("a count mismatch was accepted")
	}
	chats := []engineChatOut{
		{Rendered: "ab", Reference: "ab", Tokens: []int{1}, RefTokens: []int{1}},
		{Rendered: "ab", Reference: "ac", Tokens: []int{1}, RefTokens: []int{1}},
		{Rendered: "ab", Reference: "ab", Tokens: []int{1}, RefTokens: []int{2}},
		{Rendered: "", Reference: "", Tokens: []int{1}, RefTokens: []int{1}},
	}
	cv, cf := judgeChats([]string{"ok", "render", "tokens", "no_reference"}, chats)
	if cf != 3 || !cv[0].RenderMatch || !cv[0].TokensMatch || cv[1].RenderMatch || cv[1].FirstDiffByte != 1 || cv[2].TokensMatch || cv[3].RenderMatch {
		t.Fatalf("failed %d, verdicts %+v", cf, cv)
	}
}

// TestRouterSide runs the leading-key probes through the real parser: the
// leading key groups what shares a system prompt, the parser shares the
// system prompt's blocks across tool lists (tools follow the system
// messages in the chain), and the emulated rule does the same and ignores
// the tools' spelling.
func TestRouterSide(t *testing.T) {
	cfg := policies.ParseConfig{Deployment: "d"}
	system := strings.Repeat("You are the router's test assistant. ", 40)
	byName := map[string]probe{}
	for _, p := range ruleProbes(system) {
		byName[p.Name] = p
	}
	side := func(name string, proposed bool) routerSide {
		p, ok := byName[name]
		if !ok {
			t.Fatalf("no probe %q", name)
		}
		a, b := p.A.Body, p.B.Body
		if proposed {
			var err error
			if a, err = toolsAfterSystem(a); err != nil {
				t.Fatal(err)
			}
			if b, err = toolsAfterSystem(b); err != nil {
				t.Fatal(err)
			}
		}
		s, err := compareRouter(a, b, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	systemBlocks := len(system) / policies.DefaultBlockSize
	if s := side("same system", false); !s.LeadingEqual || s.SharedBlocks < systemBlocks || s.SharedBlocks >= s.BlocksB {
		t.Fatalf("same system: %+v", s)
	}
	// (How the current rule treats respelled tools depends on whether the
	// parser canonicalizes them, which is policies' business: not tested.)
	// The parser now renders tools after the system prompt itself (the
	// rule this check proposed): the system prompt's blocks are shared
	// across tool lists, and the chains part where the tools begin.
	for _, name := range []string{"tools differ", "tools added"} {
		if s := side(name, false); !s.LeadingEqual || s.SharedBlocks < systemBlocks || s.SharedBlocks >= s.BlocksB {
			t.Fatalf("%s, current rule: %+v", name, s)
		}
	}
	for _, name := range []string{"tools differ", "tools added", "tools respelled"} {
		if s := side(name, true); !s.LeadingEqual || s.SharedBlocks < systemBlocks {
			t.Fatalf("%s, proposed rule: %+v", name, s)
		}
	}
	if s := side("tools respelled", true); s.SharedBlocks != s.BlocksB {
		t.Fatalf("respelled tools still differ under the proposed rule: %+v", s)
	}
	if s := side("developer differs", false); s.LeadingEqual || s.SharedBlocks != 0 {
		t.Fatalf("developer differs: %+v", s)
	}
	// A body without tools is left alone.
	b := byName["same system"].A.Body
	if got, err := toolsAfterSystem(b); err != nil || string(got) != string(b) {
		t.Fatalf("toolsAfterSystem changed a body without tools: %s (%v)", got, err)
	}
}

func TestChatSpliceKeepsToolsBytes(t *testing.T) {
	b := chat([]map[string]any{msg("user", "x")}, weatherAlt)
	if !strings.Contains(string(b), string(weatherAlt)) {
		t.Fatalf("tools were re-encoded: %s", b)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil || m["tools"] == nil || m["messages"] == nil {
		t.Fatalf("body %s does not parse (%v)", b, err)
	}
	for _, c := range chats() {
		if _, err := c.engine(); err != nil {
			t.Fatal(err)
		}
		if _, err := routerKeys(c.Body, policies.ParseConfig{}); err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
	}
}

func TestWorkloadProbes(t *testing.T) {
	ps, sample, err := workloadProbes(client.WorkloadConfig{Groups: 3, PerGroup: 4, SystemChars: 300, Rate: 1, MaxTokens: 8, Seed: 2}, 5)
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, p := range ps {
		n[p.Kind]++
		var a, b engineChat
		if err := json.Unmarshal(p.A.Body, &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(p.B.Body, &b); err != nil {
			t.Fatal(err)
		}
		sysA, sysB := a.Messages[0].(map[string]any)["content"], b.Messages[0].(map[string]any)["content"]
		switch p.Kind {
		case client.SharedPrefix:
			if sysA != sysB {
				t.Fatalf("%s: different system prompts", p.Name)
			}
		case client.NoSharedPrefix:
			if sysA == sysB {
				t.Fatalf("%s: same system prompt", p.Name)
			}
		case client.MultiTurn:
			// B repeats A's messages, then the answer and a new question.
			if len(b.Messages) != len(a.Messages)+2 {
				t.Fatalf("%s: %d then %d messages", p.Name, len(a.Messages), len(b.Messages))
			}
			for i := range a.Messages {
				if a.Messages[i].(map[string]any)["content"] != b.Messages[i].(map[string]any)["content"] {
					t.Fatalf("%s: message %d differs", p.Name, i)
				}
			}
		}
	}
	if n[client.SharedPrefix] != 5 || n[client.NoSharedPrefix] != 5 || n[client.MultiTurn] != 5 || len(sample) != 6 {
		t.Fatalf("probes by kind %v, %d sample texts", n, len(sample))
	}
}

func TestSummarize(t *testing.T) {
	rs := []probeResult{
		{Kind: "k", Router: routerSide{PromptBytesB: 400}, Engines: map[string]probeEngine{"e": {PromptTokens: 100, Predicted: 60, Reusable: 50, Verdict: verdictAgree}}},
		{Kind: "k", Router: routerSide{PromptBytesB: 400}, Engines: map[string]probeEngine{"e": {PromptTokens: 100, Predicted: 20, Reusable: 50, Verdict: verdictSplit}}},
		{Kind: "other", Engines: map[string]probeEngine{"e": {Predicted: 1000}}},
	}
	s := summarize(rs, "k", "e")
	if s.Probes != 2 || s.MeanError != -10 || s.MeanAbsError != 20 || s.PredictedOverReusable != 0.8 || s.BytesPerToken != 4 ||
		s.Verdicts[verdictAgree] != 1 || s.Verdicts[verdictSplit] != 1 {
		t.Fatalf("summary %+v", s)
	}
	if s := summarize(rs, "k", "absent"); s.Probes != 0 {
		t.Fatalf("summary of an absent engine %+v", s)
	}
}
