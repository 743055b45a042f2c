package caddymodule

import (
	"bytes"
	"encoding/json"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Answer indexing (index_answers): the engine caches the KV of the tokens it
// generates, and a conversation's next turn repeats the answer. As the
// answer streams to the client, its text is fed to a policies.Answer that
// renders it as that next turn will carry it; when the answer has ended
// whole, the blocks it completed join the replica's residency index, so
// the next turn is predicted to its end, not only to where this prompt
// ended. Only the first choice's content is followed; reasoning content
// (which chat templates drop), tool calls (rendered differently) and
// several choices end the capture.

// answerCapture follows one answer.
type answerCapture struct {
	ans    *policies.Answer
	belief *policies.Belief
	// dead is set when the answer stopped being one the next turn repeats
	// as plain content.
	dead bool
}

// startAnswer begins capturing the answer whose headers carried status, if
// the attempt's policy indexes answers and the request's chain can be
// extended.
func (w *routeWriter) startAnswer(status int) {
	if w.sniff == nil || status/100 != 2 || w.rc == nil || w.rc.req == nil {
		return
	}
	a := w.rc.current()
	if a == nil || !a.rules.indexAnswers {
		return
	}
	if ans := policies.NewAnswer(w.rc.req.Keys); ans != nil {
		w.sniff.answer = &answerCapture{ans: ans, belief: a.rep.belief}
	}
}

// answerPart is the part of a chunk (streamed) or a response (not) that
// carries the answer's text.
type answerPart struct {
	Choices []struct {
		Index   int          `json:"index"`
		Delta   *answerDelta `json:"delta"`
		Message *answerDelta `json:"message"`
		Text    *string      `json:"text"`
	} `json:"choices"`
}

type answerDelta struct {
	Content      *string         `json:"content"`
	ToolCalls    json.RawMessage `json:"tool_calls"`
	FunctionCall json.RawMessage `json:"function_call"`
}

// feed reads one chunk's (or a whole response's) JSON.
func (c *answerCapture) feed(doc []byte) {
	if c.dead || !bytes.Contains(doc, []byte(`"choices"`)) {
		return
	}
	var p answerPart
	if json.Unmarshal(doc, &p) != nil {
		c.dead = true
		return
	}
	for _, ch := range p.Choices {
		if ch.Index != 0 {
			c.dead = true // several choices: which one comes back is unknown
			return
		}
		d := ch.Delta
		if d == nil {
			d = ch.Message
		}
		switch {
		case d != nil && (isSet(d.ToolCalls) || isSet(d.FunctionCall)):
			c.dead = true
			return
		case d != nil && d.Content != nil:
			c.ans.WriteString(*d.Content)
		case ch.Text != nil:
			c.ans.WriteString(*ch.Text)
		}
	}
}

// isSet reports whether a raw JSON field is present and not null.
func isSet(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

// end indexes the answer if it ended whole (finished: a finish reason or
// [DONE] was seen).
func (c *answerCapture) end(finished bool) {
	if c.dead || !finished {
		return
	}
	c.dead = true
	if chain := c.ans.Chain(); chain != nil {
		c.belief.Index().Insert(chain)
	}
}
