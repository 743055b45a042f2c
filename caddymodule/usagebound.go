package caddymodule

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmroute/caddy-llmroute/internal/wordscan"
)

// Engine-reported usage is bounded by what the request could have used
// before it is charged to the tenant's budgets, its output estimate or its
// place in the fair queue: a faulty or hostile engine's total_tokens of
// 2^62 would otherwise leave a tenant trillions of tokens in debt (429
// for ever) and its virtual time past every other tenant's, and a
// negative count would refund what was used. The bound must never
// undercharge a true report, so it is loose: the prompt is at most one
// token per byte of the request body plus promptSlack (the chat
// template's tokens), plus mediaSlack when the body names an image, audio,
// video, file or document part (media by URL or by file id cost tokens
// their bytes do not show);
// the output at most the request's own limit (max_tokens,
// max_completion_tokens, max_output_tokens, times n) or, without one, one
// token per byte of the answer relayed plus outputSlack. A clamped report
// is charged at the bound and does not teach the tenant's estimate.

// The bound's allowances beyond what the bytes show.
const (
	promptSlack = 1 << 10
	mediaSlack  = 64 << 10
	outputSlack = 4 << 10
)

// Reasons a reported usage was clamped, as llmroute_usage_clamped_total
// names them.
const (
	clampNegative = "negative"   // a count below zero, taken as zero
	clampBound    = "over_bound" // more than the request could have used
)

// usageBound is what a request could have used, as its body tells: the
// most its prompt could be, and its output limit (0 for none).
type usageBound struct {
	prompt    float64
	maxOutput int64
}

// mediaWords start a JSON string or key in each media part that costs
// tokens its bytes do not show (one by URL or by file id): OpenAI's
// image_url and file, the Responses API's input_image and input_file
// (image_url, file_id, file_url), vLLM's and SGLang's audio_url,
// video_url and image_embeds, Anthropic's image and document. Inline data
// (input_audio's, a base64 image's) is counted by its bytes.
var mediaWords = wordscan.NewSet("image", "audio", "video", "file", "document")

// boundOf reads the bound of a request body whose output limit the parse
// read (policies.Request.OutputLimit). The media words are looked for in
// one pass over the body (wordscan), which costs little where the body
// is long prompt text.
func boundOf(body []byte, outputLimit int64) usageBound {
	b := usageBound{prompt: float64(len(body)) + promptSlack, maxOutput: outputLimit}
	if wordscan.Contains(body, mediaWords) {
		b.prompt += mediaSlack
	}
	return b
}

// limit is the most tokens the request could have used, with answerBytes
// of answer relayed.
func (b usageBound) limit(answerBytes int64) float64 {
	out := float64(answerBytes) + outputSlack
	if b.maxOutput > 0 {
		out = float64(b.maxOutput)
	}
	return b.prompt + out
}

// clamp returns used within the bound and, when it was not, why.
func (b usageBound) clamp(used float64, answerBytes int64) (float64, string) {
	switch lim := b.limit(answerBytes); {
	case math.IsNaN(used) || used < 0:
		return 0, clampNegative
	case used > lim:
		return lim, clampBound
	}
	return used, ""
}

// nonNegative returns the counts of one usage object with any below zero
// taken as zero, and whether one was.
func nonNegative(prompt int, c tokenCounts) (int, tokenCounts, bool) {
	neg := prompt < 0 || c.CompletionTokens < 0 || c.TotalTokens < 0 || c.OutputTokens < 0
	return max(prompt, 0), tokenCounts{CompletionTokens: max(c.CompletionTokens, 0),
		TotalTokens: max(c.TotalTokens, 0), OutputTokens: max(c.OutputTokens, 0)}, neg
}

// boundedUsage is tokensUsed's charge for usage the engine reported: the
// whole usage within the request's bound, the clamps counted; exact is
// false for a clamped report (it teaches nothing).
func boundedUsage(sn *usageSniffer, answerBytes int64) (used float64, exact bool) {
	used, why := sn.bound.clamp(float64(sn.usageTokens), answerBytes)
	if why == "" && sn.negative {
		why = clampNegative
	}
	if why != "" {
		metricUsageClamped.WithLabelValues(why).Inc()
	}
	return used, why == ""
}

// metricUsageClamped counts reported usages that were clamped.
var metricUsageClamped = prometheus.NewCounterVec(prometheus.CounterOpts{
	Namespace: metricNS, Name: "usage_clamped_total",
	Help: "Engine-reported usages clamped before they were charged, by reason: negative (a count below zero, taken as zero) or over_bound (more than the request could have used).",
}, []string{"reason"})
