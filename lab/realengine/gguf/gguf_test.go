package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"testing"
)

// small is a cut-down model so the test stays fast; the layout code is the
// same as for the default model.
func small() Config {
	return Config{Name: "t", ContextLength: 256, Embedding: 32, Layers: 2, FeedForward: 64, Heads: 4, KVHeads: 2, Seed: 7}
}

func TestWriteParsesBack(t *testing.T) {
	c := small()
	var buf bytes.Buffer
	n, err := Write(&buf, c)
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Write reported %d bytes, wrote %d", n, buf.Len())
	}
	raw := buf.Bytes()
	f, err := Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != Version {
		t.Fatalf("version %d", f.Version)
	}
	want := map[string]any{
		"general.architecture":                   "llama",
		"general.alignment":                      uint32(32),
		"llama.context_length":                   uint32(256),
		"llama.embedding_length":                 uint32(32),
		"llama.block_count":                      uint32(2),
		"llama.feed_forward_length":              uint32(64),
		"llama.attention.head_count":             uint32(4),
		"llama.attention.head_count_kv":          uint32(2),
		"llama.rope.dimension_count":             uint32(8),
		"llama.attention.layer_norm_rms_epsilon": float32(1e-5),
		"tokenizer.ggml.model":                   "llama",
		"tokenizer.ggml.bos_token_id":            uint32(1),
		"tokenizer.ggml.eos_token_id":            uint32(2),
		"tokenizer.ggml.unknown_token_id":        uint32(0),
		"tokenizer.ggml.add_bos_token":           true,
		"tokenizer.ggml.add_space_prefix":        false,
	}
	for k, v := range want {
		got, ok := f.Get(k)
		if !ok || got != v {
			t.Errorf("%s = %#v (present %v), want %#v", k, got, ok, v)
		}
	}
	toks, _ := f.Get("tokenizer.ggml.tokens")
	types, _ := f.Get("tokenizer.ggml.token_type")
	scores, _ := f.Get("tokenizer.ggml.scores")
	ts, tt, sc := toks.([]string), types.([]int32), scores.([]float32)
	if len(ts) != 260 || len(tt) != 260 || len(sc) != 260 {
		t.Fatalf("vocab sizes %d %d %d, want 260", len(ts), len(tt), len(sc))
	}
	if ts[0] != "<unk>" || tt[0] != TokenUnknown || ts[1] != "<s>" || tt[1] != TokenControl ||
		ts[3] != "<0x00>" || ts[3+0x41] != "<0x41>" || tt[3+0x41] != TokenByte || ts[259] != "\u2581" || tt[259] != TokenNormal {
		t.Fatalf("vocabulary layout wrong: %q %v", ts[:4], tt[:4])
	}

	// 3 global tensors + 9 per layer, ggml dimension order, aligned
	// offsets, and the file ends where the last tensor does (padded).
	if len(f.Tensors) != 3+9*2 {
		t.Fatalf("%d tensors", len(f.Tensors))
	}
	if f.DataOffset%Alignment != 0 {
		t.Fatalf("data offset %d not aligned", f.DataOffset)
	}
	byName := map[string]TensorInfo{}
	for _, ti := range f.Tensors {
		if ti.Offset%Alignment != 0 || ti.Type != GGMLTypeF32 {
			t.Fatalf("tensor %s: offset %d type %d", ti.Name, ti.Offset, ti.Type)
		}
		byName[ti.Name] = ti
	}
	shape := map[string][]uint64{
		"token_embd.weight":        {32, 260},
		"output.weight":            {32, 260},
		"output_norm.weight":       {32},
		"blk.1.attn_k.weight":      {32, 16},
		"blk.1.ffn_down.weight":    {64, 32},
		"blk.0.ffn_gate.weight":    {32, 64},
		"blk.0.attn_output.weight": {32, 32},
		"blk.0.attn_norm.weight":   {32},
	}
	for name, dims := range shape {
		ti, ok := byName[name]
		if !ok {
			t.Fatalf("missing tensor %s", name)
		}
		if len(ti.Dims) != len(dims) {
			t.Fatalf("%s dims %v, want %v", name, ti.Dims, dims)
		}
		for i := range dims {
			if ti.Dims[i] != dims[i] {
				t.Fatalf("%s dims %v, want %v", name, ti.Dims, dims)
			}
		}
	}
	last := f.Tensors[len(f.Tensors)-1]
	end := f.DataOffset + int64(last.Offset+last.Elements()*4)
	if int64(len(raw)) < end || int64(len(raw)) > end+Alignment {
		t.Fatalf("file is %d bytes, last tensor ends at %d", len(raw), end)
	}
	// Norms are ones; other weights are small random values.
	at := func(ti TensorInfo, i int) float32 {
		o := f.DataOffset + int64(ti.Offset) + int64(i*4)
		return math.Float32frombits(binary.LittleEndian.Uint32(raw[o:]))
	}
	if v := at(byName["blk.0.ffn_norm.weight"], 5); v != 1 {
		t.Fatalf("norm weight %v, want 1", v)
	}
	q := byName["blk.0.attn_q.weight"]
	var nonzero int
	for i := 0; i < int(q.Elements()); i++ {
		v := at(q, i)
		if math.Abs(float64(v)) > 0.2 {
			t.Fatalf("weight %v too large", v)
		}
		if v != 0 {
			nonzero++
		}
	}
	if nonzero < int(q.Elements())*9/10 {
		t.Fatalf("only %d of %d weights nonzero", nonzero, q.Elements())
	}

	// Same seed, same bytes.
	var again bytes.Buffer
	if _, err := Write(&again, c); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, again.Bytes()) {
		t.Fatal("output is not deterministic")
	}
}

func TestDefaultSize(t *testing.T) {
	c := DefaultConfig()
	ts := c.Tensors()
	last := ts[len(ts)-1]
	size := last.Offset + last.Elements()*4
	if size < 10<<20 || size > 12<<20 {
		t.Fatalf("default model tensor data is %d bytes, want about 11 MB", size)
	}
}

func TestReadRejectsGarbage(t *testing.T) {
	for _, in := range [][]byte{nil, []byte("GGML"), []byte("GGUF\x03\x00\x00\x00"), []byte("GGUF\x09\x00\x00\x00" + string(make([]byte, 16)))} {
		if _, err := Read(bytes.NewReader(in)); err == nil {
			t.Errorf("Read(%q) succeeded", in)
		}
	}
	// A truncated valid header fails cleanly too.
	var buf bytes.Buffer
	if _, err := Write(&buf, small()); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(bytes.NewReader(buf.Bytes()[:200])); err == nil {
		t.Error("truncated header parsed")
	}
}

func TestValidate(t *testing.T) {
	c := small()
	c.Heads = 5
	if _, err := Write(&bytes.Buffer{}, c); err == nil {
		t.Error("embedding not divisible by heads accepted")
	}
}
