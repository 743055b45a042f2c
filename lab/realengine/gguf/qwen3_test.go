package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"
)

// A tokenizer.json and tokenizer_config.json in Qwen2/Qwen3's shape, cut
// down to a few tokens.
const (
	tinyTokenizerJSON = `{
  "added_tokens": [
    {"id": 6, "content": "<|endoftext|>", "special": true},
    {"id": 7, "content": "<|im_start|>", "special": true},
    {"id": 8, "content": "<|im_end|>", "special": true},
    {"id": 9, "content": "<|fim_pad|>", "special": false},
    {"id": 10, "content": "<think>", "special": false}
  ],
  "normalizer": {"type": "NFC"},
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]},
  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3, "Ġab": 4, "c": 5},
            "merges": [["a", "b"], "Ġ ab"]}
}`
	tinyConfigJSON = `{"add_bos_token": false, "bos_token": null, "eos_token": "<|im_end|>",
  "pad_token": {"__type": "AddedToken", "content": "<|endoftext|>"}, "chat_template": "{{ messages[0].content }}"}`
)

func TestLoadHFTokenizer(t *testing.T) {
	tok, err := LoadHFTokenizer([]byte(tinyTokenizerJSON), []byte(tinyConfigJSON), 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(tok.Tokens) != 16 || len(tok.Types) != 16 || tok.Added != 5 {
		t.Fatalf("%d tokens, %d types, %d added", len(tok.Tokens), len(tok.Types), tok.Added)
	}
	want := []struct {
		tok string
		typ int32
	}{
		{"a", TokenNormal}, {"b", TokenNormal}, {"ab", TokenNormal}, {"Ġ", TokenNormal}, {"Ġab", TokenNormal}, {"c", TokenNormal},
		{"<|endoftext|>", TokenControl}, {"<|im_start|>", TokenControl}, {"<|im_end|>", TokenControl},
		{"<|fim_pad|>", TokenControl}, // not special, but spelled <|...|>
		{"<think>", TokenUserDefined},
		{"[PAD11]", TokenUnused},
	}
	for id, w := range want {
		if tok.Tokens[id] != w.tok || tok.Types[id] != w.typ {
			t.Errorf("token %d = %q type %d, want %q type %d", id, tok.Tokens[id], tok.Types[id], w.tok, w.typ)
		}
	}
	if tok.Tokens[15] != "[PAD15]" {
		t.Errorf("last pad %q", tok.Tokens[15])
	}
	if strings.Join(tok.Merges, "|") != "a b|Ġ ab" {
		t.Errorf("merges %q", tok.Merges)
	}
	if tok.EOS != 8 || tok.PAD != 6 || tok.BOS != 6 || tok.AddBOS || tok.ChatTemplate != "{{ messages[0].content }}" || tok.Model != "gpt2" || tok.Pre != "qwen2" {
		t.Errorf("specials: %+v", *tok)
	}
	if own, err := LoadHFTokenizer([]byte(tinyTokenizerJSON), []byte(tinyConfigJSON), 0); err != nil || len(own.Tokens) != 11 {
		t.Errorf("vocab size 0 keeps the tokenizer's own count: %v", err)
	}
}

func TestLoadHFTokenizerRejects(t *testing.T) {
	for name, tc := range map[string]struct{ tj, cj string }{
		"not json":       {"{", tinyConfigJSON},
		"not BPE":        {strings.Replace(tinyTokenizerJSON, `"type": "BPE"`, `"type": "Unigram"`, 1), tinyConfigJSON},
		"other split":    {strings.Replace(tinyTokenizerJSON, `(?i:'s`, `(?:'s`, 1), tinyConfigJSON},
		"hole in ids":    {strings.Replace(tinyTokenizerJSON, `"c": 5`, `"c": 12`, 1), tinyConfigJSON},
		"id clash":       {strings.Replace(tinyTokenizerJSON, `"c": 5`, `"c": 4`, 1), tinyConfigJSON},
		"bad merge":      {strings.Replace(tinyTokenizerJSON, `"Ġ ab"`, `"Ġab"`, 1), tinyConfigJSON},
		"space in merge": {strings.Replace(tinyTokenizerJSON, `["a", "b"]`, `["a b", "c"]`, 1), tinyConfigJSON},
		"no template":    {tinyTokenizerJSON, strings.Replace(tinyConfigJSON, `"chat_template"`, `"x"`, 1)},
		"no eos":         {tinyTokenizerJSON, strings.Replace(tinyConfigJSON, `"eos_token": "<|im_end|>"`, `"eos_token": null`, 1)},
		"unknown eos":    {tinyTokenizerJSON, strings.Replace(tinyConfigJSON, `<|im_end|>`, `</s>`, 1)},
	} {
		if _, err := LoadHFTokenizer([]byte(tc.tj), []byte(tc.cj), 16); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadHFTokenizer([]byte(tinyTokenizerJSON), []byte(tinyConfigJSON), 10); err == nil {
		t.Error("a vocab size below the tokenizer's was accepted")
	}
}

func TestWriteQwen3ParsesBack(t *testing.T) {
	tok, err := LoadHFTokenizer([]byte(tinyTokenizerJSON), []byte(tinyConfigJSON), 16)
	if err != nil {
		t.Fatal(err)
	}
	c := Qwen3Config{Name: "q", ContextLength: 128, Embedding: 32, Layers: 2, FeedForward: 48, Heads: 4, KVHeads: 2, HeadDim: 16, Seed: 3}
	var buf bytes.Buffer
	n, err := WriteQwen3(&buf, c, tok)
	if err != nil {
		t.Fatal(err)
	}
	raw := buf.Bytes()
	if n != int64(len(raw)) {
		t.Fatalf("reported %d bytes, wrote %d", n, len(raw))
	}
	f, err := Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"general.architecture":                   "qwen3",
		"qwen3.context_length":                   uint32(128),
		"qwen3.embedding_length":                 uint32(32),
		"qwen3.block_count":                      uint32(2),
		"qwen3.feed_forward_length":              uint32(48),
		"qwen3.attention.head_count":             uint32(4),
		"qwen3.attention.head_count_kv":          uint32(2),
		"qwen3.attention.key_length":             uint32(16),
		"qwen3.attention.value_length":           uint32(16),
		"qwen3.attention.layer_norm_rms_epsilon": float32(1e-6),
		"tokenizer.ggml.model":                   "gpt2",
		"tokenizer.ggml.pre":                     "qwen2",
		"tokenizer.ggml.eos_token_id":            uint32(8),
		"tokenizer.ggml.padding_token_id":        uint32(6),
		"tokenizer.ggml.bos_token_id":            uint32(6),
		"tokenizer.ggml.add_bos_token":           false,
		"tokenizer.chat_template":                "{{ messages[0].content }}",
	}
	for k, v := range want {
		if got, ok := f.Get(k); !ok || got != v {
			t.Errorf("%s = %#v (present %v), want %#v", k, got, ok, v)
		}
	}
	toks, _ := f.Get("tokenizer.ggml.tokens")
	types, _ := f.Get("tokenizer.ggml.token_type")
	merges, _ := f.Get("tokenizer.ggml.merges")
	if ts, tt, ms := toks.([]string), types.([]int32), merges.([]string); len(ts) != 16 || ts[10] != "<think>" || tt[10] != TokenUserDefined ||
		len(tt) != 16 || len(ms) != 2 || ms[1] != "Ġ ab" {
		t.Fatalf("vocabulary %q %v merges %q", ts, tt, ms)
	}
	if _, ok := f.Get("tokenizer.ggml.scores"); ok {
		t.Error("a BPE vocabulary has no scores")
	}

	// 2 global tensors + 11 per block; the embedding in F16 and tied (no
	// output.weight); q/k norms of the head width.
	if len(f.Tensors) != 2+11*2 {
		t.Fatalf("%d tensors", len(f.Tensors))
	}
	byName := map[string]TensorInfo{}
	for _, ti := range f.Tensors {
		if ti.Offset%Alignment != 0 {
			t.Fatalf("%s at unaligned offset %d", ti.Name, ti.Offset)
		}
		byName[ti.Name] = ti
	}
	if _, ok := byName["output.weight"]; ok {
		t.Fatal("output.weight written; Qwen3's small models tie it to token_embd")
	}
	shapes := map[string]struct {
		dims []uint64
		typ  uint32
	}{
		"token_embd.weight":        {[]uint64{32, 16}, GGMLTypeF16},
		"output_norm.weight":       {[]uint64{32}, GGMLTypeF32},
		"blk.0.attn_q.weight":      {[]uint64{32, 64}, GGMLTypeF32},
		"blk.0.attn_k.weight":      {[]uint64{32, 32}, GGMLTypeF32},
		"blk.1.attn_output.weight": {[]uint64{64, 32}, GGMLTypeF32},
		"blk.1.attn_q_norm.weight": {[]uint64{16}, GGMLTypeF32},
		"blk.1.attn_k_norm.weight": {[]uint64{16}, GGMLTypeF32},
		"blk.1.ffn_down.weight":    {[]uint64{48, 32}, GGMLTypeF32},
	}
	for name, w := range shapes {
		ti, ok := byName[name]
		if !ok || ti.Type != w.typ || len(ti.Dims) != len(w.dims) {
			t.Fatalf("%s: %+v (present %v), want dims %v type %d", name, ti, ok, w.dims, w.typ)
		}
		for i := range w.dims {
			if ti.Dims[i] != w.dims[i] {
				t.Fatalf("%s dims %v, want %v", name, ti.Dims, w.dims)
			}
		}
	}
	last := f.Tensors[len(f.Tensors)-1]
	if end := f.DataOffset + int64(last.Offset+last.Bytes()); int64(len(raw)) < end || int64(len(raw)) > end+Alignment {
		t.Fatalf("file is %d bytes, last tensor ends at %d", len(raw), end)
	}
	// The F16 embedding holds small random values; norms are ones.
	emb := byName["token_embd.weight"]
	var nonzero int
	for i := 0; i < int(emb.Elements()); i++ {
		o := f.DataOffset + int64(emb.Offset) + int64(2*i)
		v := Float16To32(binary.LittleEndian.Uint16(raw[o:]))
		if math.Abs(float64(v)) > 0.2 {
			t.Fatalf("embedding weight %v too large", v)
		}
		if v != 0 {
			nonzero++
		}
	}
	if nonzero < int(emb.Elements())*9/10 {
		t.Fatalf("only %d of %d embedding weights nonzero", nonzero, emb.Elements())
	}
	qn := byName["blk.0.attn_q_norm.weight"]
	if v := math.Float32frombits(binary.LittleEndian.Uint32(raw[f.DataOffset+int64(qn.Offset)+4:])); v != 1 {
		t.Fatalf("q norm weight %v, want 1", v)
	}

	var again bytes.Buffer
	if _, err := WriteQwen3(&again, c, tok); err != nil || !bytes.Equal(raw, again.Bytes()) {
		t.Fatalf("output is not deterministic (%v)", err)
	}
	if _, err := WriteQwen3(&bytes.Buffer{}, c, nil); err == nil {
		t.Error("a model without a tokenizer was written")
	}
	c.KVHeads = 3
	if _, err := WriteQwen3(&bytes.Buffer{}, c, tok); err == nil {
		t.Error("heads not divisible by kv heads accepted")
	}
}

func TestDefaultQwen3Size(t *testing.T) {
	ts := DefaultQwen3Config().Tensors(151936)
	last := ts[len(ts)-1]
	size := last.Offset + last.Bytes()
	if size < 80<<20 || size > 90<<20 {
		t.Fatalf("default Qwen3 model tensor data is %d bytes, want about 84 MiB (the file, with the vocabulary, about 94 MB)", size)
	}
}

func TestFloat16(t *testing.T) {
	for _, tc := range []struct {
		in   float32
		want uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{0.5, 0x3800},
		{65504, 0x7bff},                       // largest half
		{65520, 0x7c00},                       // rounds up to +Inf
		{float32(math.Inf(1)), 0x7c00},        //
		{float32(math.Ldexp(1, -14)), 0x0400}, // smallest normal
		{float32(math.Ldexp(1, -24)), 0x0001}, // smallest subnormal
		{float32(math.Ldexp(1, -25)), 0x0000}, // half of it: ties to even (0)
		{float32(math.Ldexp(3, -26)), 0x0001}, // 0.75 of it: rounds up
		{1 + 1.0/2048, 0x3c00},                // tie between 1 and 1+2^-10: even (1)
		{1 + 3.0/2048, 0x3c02},                // tie: even (1+2^-9)
		{0.1, 0x2e66},
	} {
		if got := Float16(tc.in); got != tc.want {
			t.Errorf("Float16(%v) = %#04x, want %#04x", tc.in, got, tc.want)
		}
	}
	if h := Float16(float32(math.NaN())); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("NaN became %#04x", h)
	}
	// Round trip of every finite half, and the error bound on random values.
	for h := uint32(0); h < 0x10000; h++ {
		if h&0x7c00 == 0x7c00 {
			continue
		}
		if got := Float16(Float16To32(uint16(h))); got != uint16(h) {
			t.Fatalf("round trip of %#04x gave %#04x", h, got)
		}
	}
	for _, x := range []float32{0.0123, -0.0311, 1e-4, 3.3e-3} {
		back := Float16To32(Float16(x))
		if rel := math.Abs(float64(back-x)) / math.Abs(float64(x)); rel > 1.0/1024 {
			t.Errorf("%v came back as %v (relative error %v)", x, back, rel)
		}
	}
}
