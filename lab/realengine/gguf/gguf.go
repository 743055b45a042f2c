// Package gguf writes small random-weight models in the GGUF v3 format and
// reads GGUF headers back: a llama-architecture model with a byte-level
// SentencePiece vocabulary (Config, Write), and a qwen3-architecture model
// that carries a real BPE tokenizer and chat template taken from a Hugging
// Face tokenizer.json (Qwen3Config, LoadHFTokenizer, WriteQwen3). It exists so
// that llmroute's real-engine measurement can run llama.cpp on CPU without
// downloading a model: the files are regenerated in seconds and never
// committed (nor are the tokenizer files they are written from).
//
// Format reference: ggml's docs/gguf.md. Little-endian throughout:
//
//	magic "GGUF", version u32, tensor count u64, metadata count u64,
//	metadata (key string, type u32, value), tensor infos (name string,
//	n_dims u32, dims u64[n_dims] innermost first, ggml type u32, offset u64
//	relative to the data section), padding to general.alignment, tensor data.
package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// Version is the GGUF version written.
const Version = 3

// Alignment of the tensor data section and of each tensor in it.
const Alignment = 32

// Metadata value types.
const (
	TypeUint8   uint32 = 0
	TypeInt8    uint32 = 1
	TypeUint16  uint32 = 2
	TypeInt16   uint32 = 3
	TypeUint32  uint32 = 4
	TypeInt32   uint32 = 5
	TypeFloat32 uint32 = 6
	TypeBool    uint32 = 7
	TypeString  uint32 = 8
	TypeArray   uint32 = 9
	TypeUint64  uint32 = 10
	TypeInt64   uint32 = 11
	TypeFloat64 uint32 = 12
)

// ggml tensor types written here.
const (
	// GGMLTypeF32 is ggml's tensor type for 32-bit floats.
	GGMLTypeF32 uint32 = 0
	// GGMLTypeF16 is ggml's tensor type for IEEE 754 half floats.
	GGMLTypeF16 uint32 = 1
)

// Token types (llama.cpp's llama_token_type), for SentencePiece and BPE
// vocabularies alike.
const (
	TokenNormal  int32 = 1
	TokenUnknown int32 = 2
	TokenControl int32 = 3
	// TokenUserDefined marks added tokens that are not control tokens
	// (Qwen's <think>, <tool_call>): matched whole in text, printed as text.
	TokenUserDefined int32 = 4
	// TokenUnused marks padding entries of a vocabulary rounded up to the
	// model's embedding rows.
	TokenUnused int32 = 5
	TokenByte   int32 = 6
)

// Config describes the model to generate.
type Config struct {
	Name          string
	ContextLength int // llama.context_length (the trained context)
	Embedding     int // llama.embedding_length
	Layers        int // llama.block_count
	FeedForward   int // llama.feed_forward_length
	Heads         int // llama.attention.head_count
	KVHeads       int // llama.attention.head_count_kv; 0 = Heads
	Seed          uint64
	// Scale is the standard deviation of the random weights. 0 = 0.02.
	Scale float64
}

// DefaultConfig is the model the measurement uses: 4 layers, width 256,
// feed-forward 512, 4 heads, 4096-token context. About 11 MB.
func DefaultConfig() Config {
	return Config{Name: "llmroute-tiny-random", ContextLength: 4096, Embedding: 256, Layers: 4,
		FeedForward: 512, Heads: 4, KVHeads: 4, Seed: 1}
}

func (c Config) validate() error {
	if c.Embedding <= 0 || c.Layers <= 0 || c.FeedForward <= 0 || c.Heads <= 0 || c.ContextLength <= 0 {
		return errors.New("gguf: every size must be positive")
	}
	if c.Embedding%c.Heads != 0 {
		return fmt.Errorf("gguf: embedding %d not divisible by heads %d", c.Embedding, c.Heads)
	}
	if c.KVHeads < 0 || (c.KVHeads > 0 && c.Heads%c.KVHeads != 0) {
		return fmt.Errorf("gguf: heads %d not divisible by kv heads %d", c.Heads, c.KVHeads)
	}
	return nil
}

// Vocabulary returns the byte-level SentencePiece vocabulary: <unk>, <s>,
// </s>, the 256 byte tokens <0x00>..<0xFF>, and "▁" (the SentencePiece
// space) as a normal token so that a space costs one token rather than the
// three bytes of its UTF-8 encoding. Every other character falls back to
// its UTF-8 bytes, so for ASCII text one byte is one token.
func Vocabulary() (tokens []string, types []int32) {
	tokens = []string{"<unk>", "<s>", "</s>"}
	types = []int32{TokenUnknown, TokenControl, TokenControl}
	for b := 0; b < 256; b++ {
		tokens = append(tokens, fmt.Sprintf("<0x%02X>", b))
		types = append(types, TokenByte)
	}
	tokens = append(tokens, "\u2581")
	types = append(types, TokenNormal)
	return tokens, types
}

// KV is one metadata entry. Value is one of uint32, int32, float32, bool,
// string, uint64, []string, []float32, []int32 (what this package writes).
type KV struct {
	Key   string
	Value any
}

// TensorInfo describes one tensor. Dims are in ggml order (innermost first).
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   uint32
	Offset uint64
}

// Bytes is the size of the tensor's data: 2 bytes an element in F16, 4 in
// F32.
func (t TensorInfo) Bytes() uint64 {
	if t.Type == GGMLTypeF16 {
		return t.Elements() * 2
	}
	return t.Elements() * 4
}

// Elements is the tensor's element count.
func (t TensorInfo) Elements() uint64 {
	n := uint64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Metadata returns the model's metadata entries in file order.
func (c Config) Metadata() []KV {
	kvHeads := c.KVHeads
	if kvHeads == 0 {
		kvHeads = c.Heads
	}
	tokens, types := Vocabulary()
	scores := make([]float32, len(tokens))
	return []KV{
		{"general.architecture", "llama"},
		{"general.name", c.Name},
		{"general.alignment", uint32(Alignment)},
		{"general.file_type", uint32(0)}, // all F32
		{"llama.context_length", uint32(c.ContextLength)},
		{"llama.embedding_length", uint32(c.Embedding)},
		{"llama.block_count", uint32(c.Layers)},
		{"llama.feed_forward_length", uint32(c.FeedForward)},
		{"llama.attention.head_count", uint32(c.Heads)},
		{"llama.attention.head_count_kv", uint32(kvHeads)},
		{"llama.rope.dimension_count", uint32(c.Embedding / c.Heads)},
		{"llama.rope.freq_base", float32(10000)},
		{"llama.attention.layer_norm_rms_epsilon", float32(1e-5)},
		{"llama.vocab_size", uint32(len(tokens))},
		{"tokenizer.ggml.model", "llama"},
		{"tokenizer.ggml.tokens", tokens},
		{"tokenizer.ggml.scores", scores},
		{"tokenizer.ggml.token_type", types},
		{"tokenizer.ggml.unknown_token_id", uint32(0)},
		{"tokenizer.ggml.bos_token_id", uint32(1)},
		{"tokenizer.ggml.eos_token_id", uint32(2)},
		{"tokenizer.ggml.add_bos_token", true},
		{"tokenizer.ggml.add_eos_token", false},
		{"tokenizer.ggml.add_space_prefix", false},
	}
}

// Tensors returns the model's tensor infos with their data offsets.
func (c Config) Tensors() []TensorInfo {
	kvHeads := c.KVHeads
	if kvHeads == 0 {
		kvHeads = c.Heads
	}
	tokens, _ := Vocabulary()
	e, f, v := uint64(c.Embedding), uint64(c.FeedForward), uint64(len(tokens))
	ekv := e / uint64(c.Heads) * uint64(kvHeads)
	ts := []TensorInfo{
		{Name: "token_embd.weight", Dims: []uint64{e, v}},
		{Name: "output_norm.weight", Dims: []uint64{e}},
		{Name: "output.weight", Dims: []uint64{e, v}},
	}
	for l := 0; l < c.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts,
			TensorInfo{Name: p + "attn_norm.weight", Dims: []uint64{e}},
			TensorInfo{Name: p + "attn_q.weight", Dims: []uint64{e, e}},
			TensorInfo{Name: p + "attn_k.weight", Dims: []uint64{e, ekv}},
			TensorInfo{Name: p + "attn_v.weight", Dims: []uint64{e, ekv}},
			TensorInfo{Name: p + "attn_output.weight", Dims: []uint64{e, e}},
			TensorInfo{Name: p + "ffn_norm.weight", Dims: []uint64{e}},
			TensorInfo{Name: p + "ffn_gate.weight", Dims: []uint64{e, f}},
			TensorInfo{Name: p + "ffn_up.weight", Dims: []uint64{e, f}},
			TensorInfo{Name: p + "ffn_down.weight", Dims: []uint64{f, e}},
		)
	}
	for i := range ts {
		ts[i].Type = GGMLTypeF32
	}
	layout(ts)
	return ts
}

// layout sets each tensor's data offset from its size and type, every
// tensor aligned to Alignment.
func layout(ts []TensorInfo) {
	off := uint64(0)
	for i := range ts {
		ts[i].Offset = off
		off = align(off + ts[i].Bytes())
	}
}

func align(n uint64) uint64 { return (n + Alignment - 1) / Alignment * Alignment }

// isNorm reports whether a tensor is a norm weight (written as ones).
func isNorm(name string) bool {
	n := len(name)
	return n >= len("norm.weight") && name[n-len("norm.weight"):] == "norm.weight"
}

// Write writes the model to w and returns the bytes written.
func Write(w io.Writer, c Config) (int64, error) {
	if err := c.validate(); err != nil {
		return 0, err
	}
	return writeModel(w, c.Metadata(), c.Tensors(), c.Seed, c.Scale)
}

// writeModel writes a whole GGUF file: the header with meta and tensors
// (whose offsets layout has set), then the tensor data. Norm weights are
// ones; every other weight is drawn from N(0, scale²) (scale 0 = 0.02) by a
// PCG generator seeded with seed, tensor by tensor in file order, so the
// same inputs give the same bytes.
func writeModel(w io.Writer, meta []KV, tensors []TensorInfo, seed uint64, scale float64) (int64, error) {
	if scale == 0 {
		scale = 0.02
	}
	cw := &countWriter{w: bufio.NewWriterSize(w, 1<<20)}
	e := &enc{w: cw}
	e.raw([]byte(Magic))
	e.u32(Version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(meta)))
	for _, kv := range meta {
		e.str(kv.Key)
		e.value(kv.Value)
	}
	for _, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(t.Type)
		e.u64(t.Offset)
	}
	if e.err != nil {
		return cw.n, e.err
	}
	e.pad()
	dataStart := cw.n
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	buf := make([]byte, 0, 1<<16)
	for _, t := range tensors {
		if gap := int64(t.Offset) - (cw.n - dataStart); gap > 0 {
			e.raw(make([]byte, gap))
		}
		norm := isNorm(t.Name)
		for i := uint64(0); i < t.Elements(); i++ {
			x := float32(1)
			if !norm {
				x = float32(rng.NormFloat64() * scale)
			}
			switch t.Type {
			case GGMLTypeF16:
				buf = binary.LittleEndian.AppendUint16(buf, Float16(x))
			default:
				buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
			}
			if len(buf) >= cap(buf)-4 {
				e.raw(buf)
				buf = buf[:0]
			}
		}
		e.raw(buf)
		buf = buf[:0]
	}
	e.pad()
	if e.err != nil {
		return cw.n, e.err
	}
	return cw.n, cw.w.(*bufio.Writer).Flush()
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type enc struct {
	w   *countWriter
	err error
	b   [8]byte
}

func (e *enc) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}
func (e *enc) u32(v uint32) { binary.LittleEndian.PutUint32(e.b[:4], v); e.raw(e.b[:4]) }
func (e *enc) u64(v uint64) { binary.LittleEndian.PutUint64(e.b[:8], v); e.raw(e.b[:8]) }
func (e *enc) str(s string) { e.u64(uint64(len(s))); e.raw([]byte(s)) }
func (e *enc) pad() {
	if r := e.w.n % Alignment; r != 0 {
		e.raw(make([]byte, Alignment-r))
	}
}

func (e *enc) value(v any) {
	switch x := v.(type) {
	case uint32:
		e.u32(TypeUint32)
		e.u32(x)
	case int32:
		e.u32(TypeInt32)
		e.u32(uint32(x))
	case uint64:
		e.u32(TypeUint64)
		e.u64(x)
	case float32:
		e.u32(TypeFloat32)
		e.u32(math.Float32bits(x))
	case bool:
		e.u32(TypeBool)
		if x {
			e.raw([]byte{1})
		} else {
			e.raw([]byte{0})
		}
	case string:
		e.u32(TypeString)
		e.str(x)
	case []string:
		e.u32(TypeArray)
		e.u32(TypeString)
		e.u64(uint64(len(x)))
		for _, s := range x {
			e.str(s)
		}
	case []float32:
		e.u32(TypeArray)
		e.u32(TypeFloat32)
		e.u64(uint64(len(x)))
		for _, f := range x {
			e.u32(math.Float32bits(f))
		}
	case []int32:
		e.u32(TypeArray)
		e.u32(TypeInt32)
		e.u64(uint64(len(x)))
		for _, n := range x {
			e.u32(uint32(n))
		}
	default:
		if e.err == nil {
			e.err = fmt.Errorf("gguf: unsupported metadata value %T", v)
		}
	}
}
