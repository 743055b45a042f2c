// Command gguftiny writes a tiny random-weight llama model in GGUF v3 for
// llmroute's real-engine measurement (see realengine/README.md). The default
// model (4 layers, width 256, feed-forward 512, 4 heads, 260-token byte-level
// vocabulary) is about 11 MB and is written in about a second.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/llmroute/caddy-llmroute/lab/realengine/gguf"
)

func main() {
	c := gguf.DefaultConfig()
	out := flag.String("o", "tiny.gguf", "output file")
	flag.IntVar(&c.ContextLength, "ctx", c.ContextLength, "trained context length")
	flag.IntVar(&c.Embedding, "width", c.Embedding, "embedding width")
	flag.IntVar(&c.Layers, "layers", c.Layers, "transformer blocks")
	flag.IntVar(&c.FeedForward, "ff", c.FeedForward, "feed-forward width")
	flag.IntVar(&c.Heads, "heads", c.Heads, "attention heads")
	flag.IntVar(&c.KVHeads, "kv-heads", c.KVHeads, "key/value heads")
	flag.Uint64Var(&c.Seed, "seed", c.Seed, "weight seed")
	flag.Parse()

	tmp, err := os.CreateTemp(filepath.Dir(*out), ".gguftiny-*")
	if err != nil {
		fail(err)
	}
	n, err := gguf.Write(tmp, c)
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
	fmt.Printf("wrote %s: %d bytes, %d layers, width %d, ff %d, %d heads\n", *out, n, c.Layers, c.Embedding, c.FeedForward, c.Heads)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gguftiny:", err)
	os.Exit(1)
}
