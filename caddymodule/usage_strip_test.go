package caddymodule

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// Differential check of scanStrip against the original copying path.
func TestScanStripMatchesScanLines(t *testing.T) {
	stream := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n\n" +
		": comment\r\n\r\n" +
		"data: [DONE]\n\n")
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 20000; iter++ {
		a := &usageSniffer{strip: true}
		b := &usageSniffer{strip: true}
		a.start("text/event-stream")
		b.start("text/event-stream")
		var outA, outB []byte
		p := stream
		for len(p) > 0 {
			n := 1 + r.IntN(min(len(p), 1+r.IntN(120)))
			chunk := append([]byte(nil), p[:n]...)
			p = p[n:]
			var o []byte
			outA = append(outA, a.scanLines(chunk, o[:0:0])...)
			outB = append(outB, b.scanStrip(chunk)...)
		}
		if !bytes.Equal(outA, outB) || a.cached != b.cached || a.found != b.found {
			t.Fatalf("iter %d:\n%q\n%q", iter, outA, outB)
		}
		if bytes.Contains(outB, []byte(`"usage"`)) {
			t.Fatalf("usage leaked: %q", outB)
		}
	}
}
