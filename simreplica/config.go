package simreplica

import (
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// Defaults of Config.
const (
	// DefaultName is the replica name when Config.Name is empty.
	DefaultName = "sim"
	// DefaultModel is the advertised model id.
	DefaultModel = "sim-llama-3.1-8b"
	// DefaultOutputTokens is the fake model's natural answer length.
	DefaultOutputTokens = 32
	// DefaultCompletionsMaxTokens is max_tokens for /v1/completions when
	// the request has none (OpenAI's and vLLM's default).
	DefaultCompletionsMaxTokens = 16
	// DefaultRetryAfter is the Retry-After seconds of 429/503 faults.
	DefaultRetryAfter = 1
	// DefaultStall is how long a "stall" fault waits without X-Sim-Stall-Ms.
	DefaultStall = 5 * time.Second
	// DefaultRestartDown is how long /health answers 503 after a restart.
	DefaultRestartDown = 500 * time.Millisecond
	// DefaultMaxBodyBytes caps request bodies.
	DefaultMaxBodyBytes = 32 << 20
	// maxTrackedRequestIDs caps the per-X-Request-Id counts in /sim/stats.
	maxTrackedRequestIDs = 100_000
)

// Config configures a Server. Zero fields take the defaults above.
type Config struct {
	// Name is sent in the X-Sim-Replica header of every response.
	Name string
	// Model is the model id listed by /v1/models and used as the
	// model_name metric label. Requests may name any model.
	Model string
	// Engine configures the engine model (blocks, limits, costs, speed).
	Engine simengine.Config
	// Personality is the engine whose answers and metrics the replica
	// writes (what usage says about cached tokens, metric names, labels
	// and freshness); "" is vllm.
	Personality Personality
	// DataParallel is, for vllm, how many engines the metrics show (one
	// series each, the engine label); 0 and 1 are one.
	DataParallel int
	// APIKey, for llamacpp, keeps /metrics behind "Authorization: Bearer
	// <key>", as llama.cpp's server started with --api-key does.
	APIKey string
	// OutputTokens is the natural answer length: after that many tokens
	// the fake model stops with finish_reason "stop" (unless max_tokens
	// comes first: "length"). X-Sim-Output-Tokens overrides it.
	OutputTokens int
	// Fault is the global fault spec (see ParseFault), applied to every
	// inference request that has no X-Sim-Fault header.
	Fault string
	// FaultDuration, if positive, clears the global fault after that long.
	FaultDuration time.Duration
	// RetryAfter is the Retry-After seconds of 429/503 faults.
	RetryAfter int
	// Stall is the default duration of a "stall" fault.
	Stall time.Duration
	// RestartDown is how long a POST /sim/restart keeps the replica down
	// (health 503, inference 503) unless the request names down_ms.
	// Negative means no down time.
	RestartDown time.Duration
	// MaxBodyBytes caps request bodies.
	MaxBodyBytes int64
	// Logf, if set, receives one line per notable event (faults, restarts).
	Logf func(format string, args ...any)
}

func (c Config) withDefaults() Config {
	if c.Personality == "" {
		c.Personality = VLLM
	}
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.OutputTokens <= 0 {
		c.OutputTokens = DefaultOutputTokens
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.Stall <= 0 {
		c.Stall = DefaultStall
	}
	if c.RestartDown < 0 {
		c.RestartDown = 0
	} else if c.RestartDown == 0 {
		c.RestartDown = DefaultRestartDown
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c
}
