package policies

// Answer indexing: an engine caches the KV of the tokens it generates, and
// the next request of a conversation repeats the answer (chat clients send
// it back as the assistant message; agents append a completion to their
// next prompt). A router that indexes only the prompts it sent believes
// the replica's cache ends where the prompt ended, so in multi-turn chat
// its belief misses the answer part of every later turn (recall 0.89 in
// the simulator). The router sees the answer stream by: an Answer renders
// it as the next request will, and extends the prompt's block chain with
// it, one block at a time, so that the caller can add the result to the
// replica's index.

// answerKind says how an answer appears in the next request's rendering.
type answerKind uint8

const (
	// answerNone: the chain cannot be extended (no blocks, the block cap
	// reached, or a prompt shape with no known continuation).
	answerNone answerKind = iota
	// answerMessage: the next request carries the answer as an assistant
	// message (chat completions, responses), rendered like
	// renderChatMessage: "<|assistant|>\n" + content + "\n<|end|>\n".
	answerMessage
	// answerText: the next prompt is this prompt followed by the answer's
	// text (completions with a string prompt).
	answerText
)

// chainEnd is where a prompt's chain stopped: the last full block's hash
// and the partial block's bytes after it (buf, the sink's buffer up to
// them), the partial block's width, the chain's block size and cap, and
// how an answer continues it.
type chainEnd struct {
	buf   []byte
	width int
	size  int
	max   int
	kind  answerKind
}

// end records where c stopped, for an answer of the given kind.
func (c *sink) end(kind answerKind) chainEnd {
	if len(c.blocks) == 0 || len(c.blocks) >= c.max {
		return chainEnd{}
	}
	return chainEnd{buf: c.buf[:8+c.n], width: len(c.buf) - 8, size: c.size, max: c.max, kind: kind}
}

// Answer extends one prompt's block chain with the answer streamed for it.
// It holds at most one block of the answer's text. It is not safe for
// concurrent use.
type Answer struct {
	s      sink
	kind   answerKind
	prompt int // blocks of the prompt's chain
}

// NewAnswer returns an Answer that continues keys' chain, or nil when that
// chain cannot be extended: no blocks, the block cap already reached (a
// longer next request is routed by its first MaxBlocks blocks, which the
// prompt already gave), or an endpoint whose next request does not repeat
// the answer in a known shape.
func NewAnswer(keys Keys) *Answer {
	e := keys.end
	if e.kind == answerNone || len(e.buf) < 8 || len(keys.Blocks) == 0 {
		return nil
	}
	a := &Answer{kind: e.kind, prompt: len(keys.Blocks)}
	// The chain starts as the prompt's, shared and capped at its length:
	// the answer's first block of its own appends to a copy, so the
	// prompt's chain is never written and an answer that completes no
	// block copies nothing.
	a.s = sink{buf: make([]byte, 8+e.width), n: len(e.buf) - 8, size: e.size, max: e.max,
		blocks: keys.Blocks[:len(keys.Blocks):len(keys.Blocks)]}
	copy(a.s.buf, e.buf)
	if a.kind == answerMessage {
		header(&a.s, "assistant")
	}
	return a
}

// WriteString appends the next piece of the answer's text (the content of
// one streamed chunk).
func (a *Answer) WriteString(text string) { a.s.writeText(text) }

// Chain ends the answer and returns the prompt's chain followed by the
// blocks the answer completed, as the next request's chain will begin;
// nil when the answer completed no block of its own. Call it once, after
// the answer's last piece.
func (a *Answer) Chain() []uint64 {
	if a.kind == answerMessage {
		a.s.WriteString(endTag)
	}
	if len(a.s.blocks) == a.prompt {
		return nil
	}
	return a.s.blocks
}
