package simengine

import "errors"

// Request is one generation request submitted to an Engine.
type Request struct {
	// ID identifies the request; it must be unique among the requests the
	// engine currently holds (waiting or running).
	ID uint64
	// Prompt is the tokenized prompt; it must not be empty.
	Prompt []uint32
	// MaxTokens is the most tokens to generate (at least 1); reaching it
	// finishes the request with FinishLength. Prompt plus MaxTokens must
	// fit in Config.MaxModelLen.
	MaxTokens int
	// OutputTokens is the length of the answer the fake model "wants" to
	// give: after that many tokens it emits end-of-sequence and finishes
	// with FinishStop. Zero means it never stops on its own.
	OutputTokens int
}

// Errors returned by Submit.
var (
	// ErrEmptyPrompt: the prompt has no tokens.
	ErrEmptyPrompt = errors.New("engine: empty prompt")
	// ErrMaxTokens: MaxTokens is below 1.
	ErrMaxTokens = errors.New("engine: max tokens must be at least 1")
	// ErrTooLong: prompt plus MaxTokens exceeds MaxModelLen.
	ErrTooLong = errors.New("engine: prompt plus max tokens exceeds the maximum model length")
	// ErrDuplicateID: a request with this ID is already waiting or running.
	ErrDuplicateID = errors.New("engine: duplicate request id")
)
