package suite

import (
	"fmt"
	"testing"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
)

// BenchmarkParseChain is policies.Parse of a one-message chat body at
// 8K, 32K and 128K tokens for every chain of the trace experiment:
//
//	go test ./experiments/suite -run '^$' -bench ParseChain -benchmem
func BenchmarkParseChain(b *testing.B) {
	for _, n := range ParseCostSizes {
		body := chatBodyOf(n)
		for _, cc := range TraceChainCaps {
			pc := policies.ParseConfig{Deployment: "sim", BlockSize: cc.BlockBytes, MaxBlocks: cc.MaxBlocks}
			b.Run(fmt.Sprintf("tokens=%d/chain=%dx%d", n, cc.BlockBytes, cc.MaxBlocks), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for range b.N {
					if _, err := policies.Parse(workload.ChatPath, body, pc); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func TestChainCapsReach(t *testing.T) {
	// The cost table's bodies: each chain holds the blocks that lie within
	// the prompt, at most its cap, and the two longest chains (the default,
	// 1,040 KiB, and 4.1 MiB) cover a whole 128K-token prompt.
	body := chatBodyOf(128 << 10)
	covered := 0
	for _, cc := range TraceChainCaps {
		req, err := policies.Parse(workload.ChatPath, body, policies.ParseConfig{Deployment: "sim", BlockSize: cc.BlockBytes, MaxBlocks: cc.MaxBlocks})
		if err != nil {
			t.Fatal(err)
		}
		if want := min(cc.MaxBlocks, policies.ChainBlocks(req.PromptBytes, cc.BlockBytes)); len(req.Keys.Blocks) != want {
			t.Errorf("%s: %d blocks of a %d-byte prompt, want %d", cc.Label(), len(req.Keys.Blocks), req.PromptBytes, want)
		}
		if len(req.Keys.Blocks) < cc.MaxBlocks {
			covered++
		}
	}
	if covered != 2 {
		t.Errorf("%d chains cover a 128K-token prompt, want 2", covered)
	}
}
