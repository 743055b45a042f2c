// Package openai holds the shapes of OpenAI's chat completions API that
// llmroute's harnesses write (the fake replicas) and read (the load
// generators and clients): stream chunks with usage, and error bodies,
// so that both sides agree on one definition.
package openai

// ChunkObject is the object name of a stream chunk.
const ChunkObject = "chat.completion.chunk"

// Chunk is one chat.completion.chunk of a streamed answer.
type Chunk struct {
	// ID, Object (ChunkObject), Created (Unix seconds) and Model are the
	// same in every chunk of an answer.
	ID      string `json:"id,omitempty"`
	Object  string `json:"object,omitempty"`
	Created int64  `json:"created,omitempty"`
	Model   string `json:"model,omitempty"`
	// Choices is empty (not null) in the usage-only chunk that ends a
	// stream whose request asked for stream_options.include_usage.
	Choices []Choice `json:"choices"`
	Usage   *Usage   `json:"usage,omitempty"`
}

// Choice is one choice's delta in a chunk.
type Choice struct {
	// Index is the choice's position (0 with one choice).
	Index int   `json:"index"`
	Delta Delta `json:"delta"`
	// FinishReason is null until the choice's last chunk.
	FinishReason *string `json:"finish_reason"`
}

// Delta is what a chunk adds to a choice's message.
type Delta struct {
	// Role comes in the first chunk only.
	Role string `json:"role,omitempty"`
	// Content is the text this chunk adds ("" in role and finish chunks).
	Content string `json:"content"`
}

// Usage is the token accounting of an answer.
type Usage struct {
	// PromptTokens, CompletionTokens and TotalTokens count the prompt,
	// the answer and both.
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails carries cached_tokens, the prompt tokens the
	// engine served from its prefix cache (what llmroute checks its
	// predictions against).
	PromptTokensDetails *PromptTokensDetails `json:"prompt_tokens_details,omitempty"`
}

// PromptTokensDetails breaks prompt_tokens down.
type PromptTokensDetails struct {
	// CachedTokens is the prompt tokens served from the prefix cache.
	CachedTokens int `json:"cached_tokens"`
}

// Cached returns prompt_tokens_details.cached_tokens, 0 when absent.
func (u *Usage) Cached() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// Reason returns a pointer to reason, for Choice.FinishReason.
func Reason(reason string) *string { return &reason }
