package gguf

import (
	"errors"
	"fmt"
	"io"
)

// Qwen3Config describes a random-weight model of the qwen3 architecture
// that carries a real BPE tokenizer and chat template: llama.cpp then
// tokenizes and templates prompts as a Qwen3 deployment does, while the
// network stays small enough to prefill quickly on one CPU thread.
type Qwen3Config struct {
	Name          string
	ContextLength int // qwen3.context_length
	Embedding     int // qwen3.embedding_length
	Layers        int // qwen3.block_count
	FeedForward   int // qwen3.feed_forward_length
	Heads         int // qwen3.attention.head_count
	KVHeads       int // qwen3.attention.head_count_kv; 0 = Heads
	// HeadDim is qwen3.attention.key_length and value_length (Qwen3 sets
	// it apart from Embedding / Heads); 0 = Embedding / Heads.
	HeadDim int
	Seed    uint64
	// Scale is the standard deviation of the random weights. 0 = 0.02.
	Scale float64
}

// DefaultQwen3Config is the BPE model the measurement uses: the byte
// model's shape (4 layers, width 256, feed-forward 512, 4 heads of 64) with
// Qwen3's 151,936-row vocabulary. The embedding, in F16 and tied to the
// output, is most of its 94 MB.
func DefaultQwen3Config() Qwen3Config {
	return Qwen3Config{Name: "llmroute-qwen3-tokenizer-random", ContextLength: 4096, Embedding: 256, Layers: 4,
		FeedForward: 512, Heads: 4, KVHeads: 4, HeadDim: 64, Seed: 1}
}

func (c Qwen3Config) dims() (kvHeads, headDim int) {
	kvHeads, headDim = c.KVHeads, c.HeadDim
	if kvHeads == 0 {
		kvHeads = c.Heads
	}
	if headDim == 0 && c.Heads > 0 {
		headDim = c.Embedding / c.Heads
	}
	return kvHeads, headDim
}

func (c Qwen3Config) validate(tok *Tokenizer) error {
	if c.Embedding <= 0 || c.Layers <= 0 || c.FeedForward <= 0 || c.Heads <= 0 || c.ContextLength <= 0 || c.HeadDim < 0 {
		return errors.New("gguf: every size must be positive")
	}
	kv, _ := c.dims()
	if kv < 0 || c.Heads%kv != 0 {
		return fmt.Errorf("gguf: heads %d not divisible by kv heads %d", c.Heads, kv)
	}
	if tok == nil || len(tok.Tokens) == 0 || len(tok.Tokens) != len(tok.Types) {
		return errors.New("gguf: the model needs a tokenizer with as many types as tokens")
	}
	return nil
}

// Metadata returns the model's metadata entries in file order, with tok as
// its vocabulary and chat template.
func (c Qwen3Config) Metadata(tok *Tokenizer) []KV {
	kv, hd := c.dims()
	return []KV{
		{"general.architecture", "qwen3"},
		{"general.name", c.Name},
		{"general.alignment", uint32(Alignment)},
		{"general.file_type", uint32(1)}, // mostly F16 (the embedding)
		{"qwen3.context_length", uint32(c.ContextLength)},
		{"qwen3.embedding_length", uint32(c.Embedding)},
		{"qwen3.block_count", uint32(c.Layers)},
		{"qwen3.feed_forward_length", uint32(c.FeedForward)},
		{"qwen3.attention.head_count", uint32(c.Heads)},
		{"qwen3.attention.head_count_kv", uint32(kv)},
		{"qwen3.attention.key_length", uint32(hd)},
		{"qwen3.attention.value_length", uint32(hd)},
		{"qwen3.rope.freq_base", float32(1e6)},
		{"qwen3.attention.layer_norm_rms_epsilon", float32(1e-6)},
		{"tokenizer.ggml.model", tok.Model},
		{"tokenizer.ggml.pre", tok.Pre},
		{"tokenizer.ggml.tokens", tok.Tokens},
		{"tokenizer.ggml.token_type", tok.Types},
		{"tokenizer.ggml.merges", tok.Merges},
		{"tokenizer.ggml.eos_token_id", uint32(tok.EOS)},
		{"tokenizer.ggml.padding_token_id", uint32(tok.PAD)},
		{"tokenizer.ggml.bos_token_id", uint32(tok.BOS)},
		{"tokenizer.ggml.add_bos_token", tok.AddBOS},
		{"tokenizer.chat_template", tok.ChatTemplate},
	}
}

// Tensors returns the model's tensor infos, with their data offsets, for a
// vocabulary of vocab tokens. The output projection is tied to token_embd
// (no output.weight), as in the small Qwen3 models; the embedding is F16,
// every other tensor F32; each block has Qwen3's q/k norms.
func (c Qwen3Config) Tensors(vocab int) []TensorInfo {
	kv, hd := c.dims()
	e, f, v := uint64(c.Embedding), uint64(c.FeedForward), uint64(vocab)
	q, k := uint64(c.Heads*hd), uint64(kv*hd)
	ts := []TensorInfo{
		{Name: "token_embd.weight", Dims: []uint64{e, v}, Type: GGMLTypeF16},
		{Name: "output_norm.weight", Dims: []uint64{e}},
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			TensorInfo{Name: p + "attn_norm.weight", Dims: []uint64{e}},
			TensorInfo{Name: p + "attn_q.weight", Dims: []uint64{e, q}},
			TensorInfo{Name: p + "attn_k.weight", Dims: []uint64{e, k}},
			TensorInfo{Name: p + "attn_v.weight", Dims: []uint64{e, k}},
			TensorInfo{Name: p + "attn_output.weight", Dims: []uint64{q, e}},
			TensorInfo{Name: p + "attn_q_norm.weight", Dims: []uint64{uint64(hd)}},
			TensorInfo{Name: p + "attn_k_norm.weight", Dims: []uint64{uint64(hd)}},
			TensorInfo{Name: p + "ffn_norm.weight", Dims: []uint64{e}},
			TensorInfo{Name: p + "ffn_gate.weight", Dims: []uint64{e, f}},
			TensorInfo{Name: p + "ffn_up.weight", Dims: []uint64{e, f}},
			TensorInfo{Name: p + "ffn_down.weight", Dims: []uint64{f, e}},
		)
	}
	layout(ts)
	return ts
}

// WriteQwen3 writes the model with tok's vocabulary and template to w and
// returns the bytes written.
func WriteQwen3(w io.Writer, c Qwen3Config, tok *Tokenizer) (int64, error) {
	if err := c.validate(tok); err != nil {
		return 0, err
	}
	return writeModel(w, c.Metadata(tok), c.Tensors(len(tok.Tokens)), c.Seed, c.Scale)
}
