package simreplica

import (
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// Personality is the engine a replica answers as, where engines differ in
// what a router reads (../shared/notes/engine-facts.md names the sources):
//
//   - vllm (the default): usage.prompt_tokens_details only when something
//     was cached (vLLM's serving.py, with --enable-prompt-tokens-details),
//     and Anthropic usage without cache_read_input_tokens, input_tokens
//     the whole prompt;
//   - sglang: the same silence (--enable-cache-report);
//   - llamacpp: cached_tokens always, 0 included, and Anthropic's
//     cache_read_input_tokens with input_tokens the uncached part.
type Personality string

// The personalities.
const (
	VLLM     Personality = "vllm"
	SGLang   Personality = "sglang"
	LlamaCpp Personality = "llamacpp"
)

// ParsePersonality checks an -engine value ("" is vllm).
func ParsePersonality(s string) (Personality, error) {
	switch p := Personality(s); p {
	case "":
		return VLLM, nil
	case VLLM, SGLang, LlamaCpp:
		return p, nil
	}
	return "", fmt.Errorf("simreplica: unknown engine %q (vllm, sglang, llamacpp)", s)
}

// reportsZero says whether the engine writes a cached-token count of 0.
func (p Personality) reportsZero() bool { return p == LlamaCpp }

// apiUsage is the OpenAI usage object the engine writes for u.
func (p Personality) apiUsage(u simengine.Usage) *apiUsage {
	a := &apiUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	if u.CachedTokens > 0 || p.reportsZero() {
		a.PromptTokensDetails = &cachedDetails{CachedTokens: u.CachedTokens}
	}
	return a
}

// anthropicUsage is Anthropic's usage object the engine writes for a
// prompt of prompt tokens of which cached were cached.
func (p Personality) anthropicUsage(prompt, cached, output int) anthropicUsage {
	if p != LlamaCpp {
		return anthropicUsage{InputTokens: prompt, OutputTokens: output}
	}
	return anthropicUsage{InputTokens: prompt - cached, CacheReadInputTokens: &cached, OutputTokens: output}
}

// keyed reports whether r carries key as a Bearer token, compared in
// constant time.
func keyed(r *http.Request, key string) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(key)) == 1
}
