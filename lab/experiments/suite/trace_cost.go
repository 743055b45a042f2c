package suite

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
)

// ParseCost is what a router pays per request for its keys at one prompt
// size and chain: policies.Parse of the chat body (decode, rendering,
// block hashes), and the index's Match of those keys against a replica
// that holds them all (the longest walk a Pick makes per replica).
type ParseCost struct {
	PromptTokens int    `json:"prompt_tokens"`
	BodyBytes    int    `json:"body_bytes"`
	Chain        string `json:"chain"`
	Blocks       int    `json:"blocks"`
	// ParseNs, ParseBytes and ParseAllocs are per Parse.
	ParseNs     float64 `json:"parse_ns"`
	ParseBytes  int64   `json:"parse_bytes"`
	ParseAllocs int64   `json:"parse_allocs"`
	// MatchNs is per Index.Match on a replica holding the whole chain.
	MatchNs float64 `json:"match_ns"`
}

// ParseCostSizes are the prompt sizes of MeasureParseCost, in tokens.
var ParseCostSizes = []int{8 << 10, 32 << 10, 128 << 10}

// chatBodyOf is an OpenAI chat body whose one user message has tokens
// tokens of the lab's pseudo-English.
func chatBodyOf(tokens int) []byte {
	src := workload.NewTextSource(7)
	text := src.Text(rand.New(rand.NewPCG(7, uint64(tokens))), tokens)
	b, err := json.Marshal(map[string]any{"model": workload.DefaultModel, "max_tokens": 16, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": text}}})
	if err != nil {
		panic(err) // strings and ints always encode
	}
	return b
}

// MeasureParseCost times Parse and Match at each of sizes and chains with
// testing.Benchmark (about a second each; the figures are this machine's).
func MeasureParseCost(sizes []int, chains []ChainCap) []ParseCost {
	var out []ParseCost
	for _, n := range sizes {
		body := chatBodyOf(n)
		for _, cc := range chains {
			pc := policies.ParseConfig{Deployment: "sim", BlockSize: cc.BlockBytes, MaxBlocks: cc.MaxBlocks}
			req, err := policies.Parse(workload.ChatPath, body, pc)
			if err != nil {
				panic(err) // the body is a well-formed chat request
			}
			ix := policies.NewIndex(1 << 16)
			ix.Insert(req.Keys.Blocks)
			pr := testing.Benchmark(func(b *testing.B) {
				b.ReportAllocs()
				for range b.N {
					if _, err := policies.Parse(workload.ChatPath, body, pc); err != nil {
						b.Fatal(err)
					}
				}
			})
			mr := testing.Benchmark(func(b *testing.B) {
				for range b.N {
					if ix.Match(req.Keys.Blocks) != len(req.Keys.Blocks) {
						b.Fatal("index lost the chain")
					}
				}
			})
			out = append(out, ParseCost{PromptTokens: n, BodyBytes: len(body), Chain: cc.Label(), Blocks: len(req.Keys.Blocks),
				ParseNs: round(float64(pr.NsPerOp()), 0), ParseBytes: pr.AllocedBytesPerOp(), ParseAllocs: pr.AllocsPerOp(),
				MatchNs: round(float64(mr.NsPerOp()), 0)})
		}
	}
	return out
}
