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

// within reports whether sub is a subslice of p (shares its memory).
func within(sub, p []byte) bool {
	if len(sub) == 0 {
		return true
	}
	for i := range p {
		if &p[i] == &sub[0] {
			return len(sub) <= len(p)-i
		}
	}
	return false
}

// Differential check of scanStrip against the straightforward copying
// strip and of what it reads against scanLines (the non-stripping scan),
// over random splits of one stream. Each split must give exactly the
// stream less its usage chunk, and the splits must have taken scanStrip's
// harder paths (a usage line carried across writes, a kept run copied
// around a dropped line) often enough to mean something.
func TestScanStripMatchesReferenceStrip(t *testing.T) {
	head := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n\n"
	usage := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"prompt_tokens_details\":{\"cached_tokens\":5}}}\n"
	tail := ": comment\r\n\r\n" +
		"data: [DONE]\n\n"
	stream := []byte(head + usage + "\n" + tail)
	want := []byte(head + tail)
	u0, u1 := len(head), len(head)+len(usage) // the usage line
	r := rand.New(rand.NewPCG(1, 2))
	const iters = 20000
	var carried, copied, around int
	for iter := 0; iter < iters; iter++ {
		a := &usageSniffer{strip: true}
		b := &usageSniffer{strip: true}
		c := &usageSniffer{}
		a.start("text/event-stream")
		b.start("text/event-stream")
		c.start("text/event-stream")
		var outA, outB, outC []byte
		split, didCopy, dropInside := false, false, false
		p := stream
		for len(p) > 0 {
			n := 1 + r.IntN(min(len(p), 1+r.IntN(120)))
			at := len(stream) - len(p)
			if at+n > u0 && at+n < u1 {
				split = true
			}
			if at < u0 && at+n > u1+1 {
				dropInside = true // kept bytes on both sides of the dropped lines
			}
			chunk := append([]byte(nil), p[:n]...)
			p = p[n:]
			outA = append(outA, referenceStrip(a, chunk)...)
			got := b.scanStrip(chunk)
			if !within(got, chunk) {
				didCopy = true
			}
			outB = append(outB, got...)
			outC = append(outC, c.observe(append([]byte(nil), chunk...))...)
		}
		if !bytes.Equal(outA, outB) || a.cached != b.cached || a.found != b.found {
			t.Fatalf("iter %d:\n%q\n%q", iter, outA, outB)
		}
		if !bytes.Equal(outB, want) {
			t.Fatalf("iter %d: stripped stream\n%q\nwant\n%q", iter, outB, want)
		}
		if !b.found || b.cached != 5 || b.promptTokens != 10 || !b.finished {
			t.Fatalf("iter %d: strip read found %v cached %d prompt %d finished %v", iter, b.found, b.cached, b.promptTokens, b.finished)
		}
		if !bytes.Equal(outC, stream) || c.found != b.found || c.cached != b.cached || c.promptTokens != b.promptTokens || c.finished != b.finished {
			t.Fatalf("iter %d: scanLines relayed %q and read found %v cached %d prompt %d finished %v", iter, outC, c.found, c.cached, c.promptTokens, c.finished)
		}
		if split {
			carried++
		}
		if didCopy {
			copied++
		}
		if dropInside {
			around++
		}
	}
	t.Logf("%d splits: usage line carried across writes in %d, dropped inside one write in %d; scanStrip copied in %d", iters, carried, around, copied)
	if carried < iters/4 || around < 20 || copied < iters/4 {
		t.Fatalf("of %d splits only %d carried the usage line across writes, %d dropped it inside one write and %d made scanStrip copy", iters, carried, around, copied)
	}
}
