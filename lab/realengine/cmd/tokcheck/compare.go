package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"

	"github.com/llmroute/caddy-llmroute/policies"
)

// engineOut is what check.mjs returns: per text the two tokenizations, per
// chat the server's rendering and tokens and (with the model's template)
// the reference rendering and its reference tokens.
type engineOut struct {
	Texts []struct {
		Llama []int `json:"llama"`
		Ref   []int `json:"ref"`
	} `json:"texts"`
	Chats []engineChatOut `json:"chats"`
}

type engineChatOut struct {
	Rendered  string `json:"rendered"`
	Tokens    []int  `json:"tokens"`
	Reference string `json:"reference"`
	RefTokens []int  `json:"ref_tokens"`
}

// textVerdict is the tokenization check of one text.
type textVerdict struct {
	textCase
	Tokens    int  `json:"llama_tokens"`
	RefTokens int  `json:"reference_tokens"`
	Match     bool `json:"match"`
	// FirstDiff is the first token index where the two differ (-1 none).
	FirstDiff int `json:"first_diff"`
}

// chatVerdict is the template check of one chat.
type chatVerdict struct {
	Name        string `json:"name"`
	RenderMatch bool   `json:"render_match"`
	// FirstDiffByte is where the server's rendering first differs from
	// the reference (-1 none).
	FirstDiffByte int  `json:"first_diff_byte"`
	TokensMatch   bool `json:"tokens_match"`
	Tokens        int  `json:"tokens"`
	RenderedBytes int  `json:"rendered_bytes"`
}

// firstDiff returns the first index where a and b differ, -1 if equal.
func firstDiff[T comparable](a, b []T) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// judgeTexts compares llama.cpp's tokens with the reference tokenizer's.
// It returns the verdicts and how many texts failed: differed without a
// known reason.
func judgeTexts(cases []textCase, got engineOut) ([]textVerdict, int, error) {
	if len(got.Texts) != len(cases) {
		return nil, 0, fmt.Errorf("check.mjs returned %d texts for %d cases", len(got.Texts), len(cases))
	}
	var out []textVerdict
	failed := 0
	for i, c := range cases {
		g := got.Texts[i]
		d := firstDiff(g.Llama, g.Ref)
		v := textVerdict{textCase: c, Tokens: len(g.Llama), RefTokens: len(g.Ref), Match: d < 0, FirstDiff: d}
		if len(g.Ref) == 0 && c.Text != "" {
			v.Match = false // the reference tokenized nothing: not a comparison
		}
		if !v.Match && c.Known == "" {
			failed++
		}
		out = append(out, v)
	}
	return out, failed, nil
}

// judgeChats compares the server's renderings with the reference ones and
// the server's prompt tokens with the reference tokens of the reference
// rendering; it returns the verdicts and how many chats failed either.
func judgeChats(names []string, got []engineChatOut) ([]chatVerdict, int) {
	var out []chatVerdict
	failed := 0
	for i, name := range names {
		g := got[i]
		v := chatVerdict{Name: name, Tokens: len(g.Tokens), RenderedBytes: len(g.Rendered)}
		v.FirstDiffByte = firstDiff([]byte(g.Rendered), []byte(g.Reference))
		v.RenderMatch = v.FirstDiffByte < 0 && g.Reference != ""
		v.TokensMatch = firstDiff(g.Tokens, g.RefTokens) < 0 && len(g.RefTokens) > 0
		if !v.RenderMatch || !v.TokensMatch {
			failed++
		}
		out = append(out, v)
	}
	return out, failed
}

// routerSide is what the router makes of a probe's two requests under one
// leading-key rule.
type routerSide struct {
	LeadingEqual bool `json:"leading_key_equal"`
	// SharedBlocks is how many leading blocks of B's chain equal A's: what
	// the router believes B can reuse after A (a full index).
	SharedBlocks int `json:"shared_blocks"`
	BlocksB      int `json:"blocks_b"`
	PromptBytesB int `json:"prompt_bytes_b"`
}

// probeEngine is one engine's side of a probe.
type probeEngine struct {
	PromptTokens int `json:"prompt_tokens_b"`
	// LCP is the token-exact common prefix of A's and B's prompts, and
	// Reusable what the engine reports of it: rounded down to 16-token
	// blocks, at least one token left to compute (server.mjs's rule).
	LCP      int `json:"lcp_tokens"`
	Reusable int `json:"reusable_tokens"`
	// Predicted is the router's shared blocks in the engine's tokens, as
	// llmroute converts them (policies.PredictedTokens: B's own bytes per
	// token); Verdict compares it with Reusable.
	Predicted int    `json:"predicted_tokens"`
	Verdict   string `json:"verdict"`
	// The same under the proposed rule, for probes with tools.
	AfterPredicted int    `json:"proposed_predicted_tokens,omitempty"`
	AfterVerdict   string `json:"proposed_verdict,omitempty"`
}

// probeResult is a probe's outcome on every engine.
type probeResult struct {
	Name    string                 `json:"name"`
	Kind    string                 `json:"kind"`
	What    string                 `json:"what"`
	Router  routerSide             `json:"router"`
	After   *routerSide            `json:"proposed_rule,omitempty"`
	Engines map[string]probeEngine `json:"engines"`
}

// Verdicts on a probe.
const (
	verdictAgree = "agrees"
	// verdictSplit: the router believes less than the engine reuses,
	// nothing at all when the leading keys differ (a lost hit).
	verdictSplit = "router misses a shared prefix"
	// verdictOver: both see a shared prefix, the router a longer one.
	verdictOver = "router over-counts a shared prefix"
	// verdictFalse: the router predicts a prefix the engine does not have:
	// the module's feedback counts a miss (which shrinks, and three in a
	// row purge, its index).
	verdictFalse = "router predicts a prefix the engine lacks"
)

// verdict compares a prediction with what the engine reuses: whether the
// module would see a hit where there is none, or none where there is one,
// then the length, allowing one router block (in the engine's tokens) plus
// one engine block of boundary error, since the two never cut the prompt
// at the same places.
func verdict(predicted, reusable, blockBytes, promptBytes, promptTokens int) string {
	slack := 16
	if promptBytes > 0 {
		slack += int(math.Ceil(float64(blockBytes) * float64(promptTokens) / float64(promptBytes)))
	}
	switch {
	case predicted > 0 && reusable == 0:
		return verdictFalse
	case predicted == 0 && reusable > 0, predicted < reusable-slack:
		return verdictSplit
	case predicted > reusable+slack:
		return verdictOver
	}
	return verdictAgree
}

// reusable is server.mjs's reuse rule: the common prefix rounded down to
// block tokens, leaving at least one token of the prompt to evaluate.
func reusable(lcp, promptTokens, block int) int {
	return max(min(lcp/block*block, promptTokens-1), 0)
}

// routerKeys parses a chat body as llmroute does.
func routerKeys(b json.RawMessage, cfg policies.ParseConfig) (*policies.Request, error) {
	r, err := policies.Parse("/v1/chat/completions", b, cfg)
	if err != nil {
		return nil, err
	}
	if r.NoPrefix != "" {
		return nil, fmt.Errorf("no prefix: %s", r.NoPrefix)
	}
	return r, nil
}

// compareRouter computes the router side of a probe.
func compareRouter(a, b json.RawMessage, cfg policies.ParseConfig) (routerSide, error) {
	ra, err := routerKeys(a, cfg)
	if err != nil {
		return routerSide{}, err
	}
	rb, err := routerKeys(b, cfg)
	if err != nil {
		return routerSide{}, err
	}
	n := firstDiff(ra.Keys.Blocks, rb.Keys.Blocks)
	if n < 0 {
		n = len(rb.Keys.Blocks)
	}
	return routerSide{LeadingEqual: ra.Keys.Leading == rb.Keys.Leading, SharedBlocks: n,
		BlocksB: len(rb.Keys.Blocks), PromptBytesB: rb.PromptBytes}, nil
}

// toolsAfterSystem rewrites a chat body for the proposed leading-key rule:
// the tools leave the leading key and are hashed, compacted (whitespace
// removed, key order kept: the template re-serializes them, so spelling is
// not part of the prompt), into the block chain right after the leading
// system/developer messages. It is emulated here,
// without changing policies, by moving the tools into a message of a role
// that is not part of the leading run, placed after that run; the body is
// returned unchanged when it has no tools.
func toolsAfterSystem(b json.RawMessage) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	tools, ok := m["tools"]
	if !ok {
		return b, nil
	}
	delete(m, "tools")
	var compact bytes.Buffer
	if err := json.Compact(&compact, tools); err != nil {
		return nil, err
	}
	var msgs []map[string]any
	if err := json.Unmarshal(m["messages"], &msgs); err != nil {
		return nil, err
	}
	i := 0
	for i < len(msgs) && (msgs[i]["role"] == "system" || msgs[i]["role"] == "developer") {
		i++
	}
	spec := map[string]any{"role": "tools", "content": compact.String()}
	msgs = append(msgs[:i], append([]map[string]any{spec}, msgs[i:]...)...)
	raw, err := json.Marshal(msgs)
	if err != nil {
		return nil, err
	}
	m["messages"] = raw
	return json.Marshal(m)
}

// probeSummary aggregates probes of one kind on one engine.
type probeSummary struct {
	Probes int `json:"probes"`
	// MeanError and MeanAbsError are predicted − reusable tokens.
	MeanError    float64 `json:"mean_predicted_minus_reusable"`
	MeanAbsError float64 `json:"mean_abs_error"`
	// PredictedOverReusable is the sums' ratio (0 when nothing is reusable).
	PredictedOverReusable float64 `json:"predicted_over_reusable"`
	// BytesPerToken is the router's canonical bytes over the engine's
	// prompt tokens, over the B requests (llmroute assumes 4).
	BytesPerToken float64        `json:"router_bytes_per_engine_token"`
	Verdicts      map[string]int `json:"verdicts"`
	MeanReusable  float64        `json:"mean_reusable_tokens"`
	MeanPredicted float64        `json:"mean_predicted_tokens"`
}

// summarize aggregates probe results of kind on engine.
func summarize(rs []probeResult, kind, engine string) probeSummary {
	s := probeSummary{Verdicts: map[string]int{}}
	var pred, reuse, bytes, toks float64
	for _, r := range rs {
		e, ok := r.Engines[engine]
		if r.Kind != kind || !ok {
			continue
		}
		s.Probes++
		d := float64(e.Predicted - e.Reusable)
		s.MeanError += d
		s.MeanAbsError += math.Abs(d)
		pred += float64(e.Predicted)
		reuse += float64(e.Reusable)
		bytes += float64(r.Router.PromptBytesB)
		toks += float64(e.PromptTokens)
		s.Verdicts[e.Verdict]++
	}
	if s.Probes == 0 {
		return s
	}
	n := float64(s.Probes)
	s.MeanError, s.MeanAbsError = s.MeanError/n, s.MeanAbsError/n
	s.MeanPredicted, s.MeanReusable = pred/n, reuse/n
	if reuse > 0 {
		s.PredictedOverReusable = pred / reuse
	}
	if toks > 0 {
		s.BytesPerToken = bytes / toks
	}
	return s
}
