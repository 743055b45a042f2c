package caddymodule

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// referenceStrip is the straightforward copying strip that scanStrip
// replaced: every kept line appended to a new slice.
func referenceStrip(s *usageSniffer, p []byte) []byte {
	var out []byte
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(s.line)+len(p) <= maxSniffLine {
				s.line = append(s.line, p...)
			} else {
				out = append(out, s.line...)
				out = append(out, p...)
				s.line = s.line[:0]
			}
			return out
		}
		line := p[:i+1]
		if len(s.line) > 0 {
			s.line = append(s.line, line...)
			line = s.line
		}
		if !s.inspect(line) {
			out = append(out, line...)
		}
		s.line = s.line[:0]
		p = p[i+1:]
	}
	return out
}

// Differential check of scanStrip against the straightforward copying strip.
func TestScanStripMatchesReferenceStrip(t *testing.T) {
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
			outA = append(outA, referenceStrip(a, chunk)...)
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
