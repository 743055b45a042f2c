package simengine

// EventKind says what happened to a request during a step.
type EventKind uint8

const (
	// EventFirstToken: the request finished its prefill and generated its
	// first token (Token, Index 0). CachedTokens is set.
	EventFirstToken EventKind = iota + 1
	// EventToken: the request generated one more token (Token, Index).
	EventToken
	// EventFinished: the request is done (Reason, Usage) and has left the
	// engine. It follows the request's last token event in the same step.
	EventFinished
)

// String names the kind for logs and test failures.
func (k EventKind) String() string {
	switch k {
	case EventFirstToken:
		return "first_token"
	case EventToken:
		return "token"
	case EventFinished:
		return "finished"
	}
	return "unknown"
}

// FinishReason says why a request finished.
type FinishReason uint8

const (
	// FinishStop: the model reached its natural end (Request.OutputTokens).
	FinishStop FinishReason = iota + 1
	// FinishLength: the request reached Request.MaxTokens.
	FinishLength
)

// String returns the OpenAI finish_reason for r ("stop" or "length").
func (r FinishReason) String() string {
	switch r {
	case FinishStop:
		return "stop"
	case FinishLength:
		return "length"
	}
	return ""
}

// Usage is the token accounting of one finished request, as the OpenAI
// usage object reports it.
type Usage struct {
	// PromptTokens is the prompt length in tokens.
	PromptTokens int
	// CachedTokens is how many prompt tokens came from the prefix cache
	// when the request was first scheduled (like vLLM, later recomputation
	// after a preemption does not change it).
	CachedTokens int
	// CompletionTokens is the number of generated tokens.
	CompletionTokens int
	// Preemptions counts how often the request was preempted.
	Preemptions int
}

// Event is one thing that happened to one request during a step. Every
// event of a step happens at the end of the step, that is at the time the
// step started plus the duration Step returned.
type Event struct {
	// Kind says which of the fields below are set.
	Kind EventKind
	// ID is the request's ID.
	ID uint64
	// Token is the generated token (EventFirstToken, EventToken); its text
	// is TokenText(Token).
	Token uint32
	// Index is the 0-based position of Token in the output.
	Index int
	// CachedTokens is the prompt tokens served from the prefix cache
	// (EventFirstToken and, inside Usage, EventFinished).
	CachedTokens int
	// Reason is why the request finished (EventFinished).
	Reason FinishReason
	// Usage is the request's final accounting (EventFinished).
	Usage Usage
}
