package simengine

import (
	"errors"
	"fmt"
	"time"
)

// Default configuration values. The capacity and scheduler limits follow
// vLLM's names and, where sensible, its defaults; the step costs model an
// 8B-parameter model (Llama-3.1-8B class) in bf16 on one data-centre GPU
// (A100/H100 class) under vLLM. They are approximate, chosen to land in the
// ranges that public numbers show:
//
//   - decode: NVIDIA's NIM LLM benchmarking "Performance" page lists, for
//     Llama-3.1-8B-Instruct on one H100, inter-token latencies of about
//     4.6 ms at concurrency 1, 7.6 ms at 100 and 12.7 ms at 200 (an
//     optimised, fp8 deployment). A bf16 vLLM deployment is slower at low
//     batch: reading 16 GB of weights per step takes about 5 ms at H100
//     (3.35 TB/s) and 8 ms at A100 (2 TB/s) memory bandwidth. We model a
//     decode step as 10 ms + 0.1 ms per running sequence: 10.1 ms alone,
//     about 13 ms at a batch of 32.
//   - prefill: about 2 x 8e9 = 16 GFLOP per token; at a realistic 250 to
//     300 TFLOP/s of an H100's bf16 peak that is 15k to 20k tokens/s, and
//     about half that on an A100. We model 60 us per prefill token
//     (about 16.7k tokens/s).
//   - vLLM's own "v0.6.0: 2.7x throughput improvement and 5x latency
//     reduction" post (blog.vllm.ai, 2024-09-05) benchmarks the same model
//     class, Llama 3 8B on one H100.
//
// See docs/engine-model.md.
const (
	// DefaultNumBlocks is the number of KV blocks (32,768 tokens). A real
	// 80 GB GPU holds about 25k blocks of an 8B model at 0.9 memory
	// utilisation; the default is smaller so that eviction shows up in
	// demos and experiments with modest traffic.
	DefaultNumBlocks = 2048
	// DefaultBlockSize is vLLM's default block size in tokens.
	DefaultBlockSize = 16
	// DefaultMaxNumSeqs is vLLM's default max_num_seqs.
	DefaultMaxNumSeqs = 256
	// DefaultMaxNumBatchedTokens is vLLM V1's default token budget per step
	// for the OpenAI-compatible server (max_num_batched_tokens).
	DefaultMaxNumBatchedTokens = 2048
	// DefaultStepFixed is the fixed cost of one engine step.
	DefaultStepFixed = 10 * time.Millisecond
	// DefaultPrefillTokenCost is the cost of each prompt (prefill) token
	// computed in a step.
	DefaultPrefillTokenCost = 60 * time.Microsecond
	// DefaultSeqCost is the cost of each sequence scheduled in a step.
	DefaultSeqCost = 100 * time.Microsecond
)

// Config sets an Engine's capacity, scheduler limits and step costs. Zero
// fields take their defaults (see DefaultConfig); negative ones are errors.
// The three step costs default together: only when all three are zero do
// they take the defaults, otherwise a zero cost means free.
type Config struct {
	// NumBlocks is the number of KV cache blocks (vLLM's num_gpu_blocks).
	NumBlocks int
	// BlockSize is the number of tokens per KV block.
	BlockSize int
	// MaxNumSeqs caps the number of running sequences (max_num_seqs).
	MaxNumSeqs int
	// MaxNumBatchedTokens caps the tokens computed in one step, prefill
	// chunks and decode tokens together (max_num_batched_tokens).
	MaxNumBatchedTokens int
	// MaxModelLen caps prompt plus output tokens of one request; zero means
	// the whole cache, NumBlocks*BlockSize, which is also the upper bound.
	MaxModelLen int
	// StepFixed is the fixed cost of one step.
	StepFixed time.Duration
	// PrefillTokenCost is the cost of each prefill token in a step (every
	// scheduled token that is not a sequence's single decode token).
	PrefillTokenCost time.Duration
	// SeqCost is the cost of each sequence scheduled in a step.
	SeqCost time.Duration
	// Speed divides every step duration: 10 makes the engine ten times
	// faster than the modelled GPU. Zero means 1.
	Speed float64
}

// DefaultConfig returns the defaults: an 8B model on one GPU, at speed 1.
func DefaultConfig() Config {
	return Config{
		NumBlocks:           DefaultNumBlocks,
		BlockSize:           DefaultBlockSize,
		MaxNumSeqs:          DefaultMaxNumSeqs,
		MaxNumBatchedTokens: DefaultMaxNumBatchedTokens,
		MaxModelLen:         DefaultNumBlocks * DefaultBlockSize,
		StepFixed:           DefaultStepFixed,
		PrefillTokenCost:    DefaultPrefillTokenCost,
		SeqCost:             DefaultSeqCost,
		Speed:               1,
	}
}

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("engine: invalid config")

// Normalize returns c with zero fields set to their defaults, or an error
// wrapping ErrConfig when a field is negative. MaxModelLen is clamped to
// NumBlocks*BlockSize. New calls it; callers may use it to see the
// effective configuration.
func (c Config) Normalize() (Config, error) {
	if c.NumBlocks < 0 || c.BlockSize < 0 || c.MaxNumSeqs < 0 || c.MaxNumBatchedTokens < 0 ||
		c.MaxModelLen < 0 || c.StepFixed < 0 || c.PrefillTokenCost < 0 || c.SeqCost < 0 || c.Speed < 0 {
		return c, fmt.Errorf("%w: negative value in %+v", ErrConfig, c)
	}
	d := DefaultConfig()
	if c.NumBlocks == 0 {
		c.NumBlocks = d.NumBlocks
	}
	if c.BlockSize == 0 {
		c.BlockSize = d.BlockSize
	}
	if c.MaxNumSeqs == 0 {
		c.MaxNumSeqs = d.MaxNumSeqs
	}
	if c.MaxNumBatchedTokens == 0 {
		c.MaxNumBatchedTokens = d.MaxNumBatchedTokens
	}
	if c.StepFixed == 0 && c.PrefillTokenCost == 0 && c.SeqCost == 0 {
		c.StepFixed, c.PrefillTokenCost, c.SeqCost = d.StepFixed, d.PrefillTokenCost, d.SeqCost
	}
	if c.Speed == 0 {
		c.Speed = 1
	}
	capacity := c.NumBlocks * c.BlockSize
	if c.MaxModelLen == 0 || c.MaxModelLen > capacity {
		c.MaxModelLen = capacity
	}
	if c.MaxModelLen < 2 {
		return c, fmt.Errorf("%w: MaxModelLen %d leaves no room for a prompt and an output token", ErrConfig, c.MaxModelLen)
	}
	return c, nil
}

// StepTime is the modelled duration of a step that computes prefillTokens
// prompt tokens for seqs scheduled sequences, divided by Speed. A step
// that schedules something always takes at least 1 ns, so virtual time
// always advances.
func (c Config) StepTime(prefillTokens, seqs int) time.Duration {
	d := c.StepFixed + time.Duration(prefillTokens)*c.PrefillTokenCost + time.Duration(seqs)*c.SeqCost
	speed := c.Speed
	if speed <= 0 {
		speed = 1
	}
	dt := time.Duration(float64(d) / speed)
	if dt < 1 {
		dt = 1
	}
	return dt
}
