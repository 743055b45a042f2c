package caddymodule

import (
	"bytes"
	"encoding/json"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
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
	// choices is feed's scratch, kept across chunks.
	choices []answerChoice
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

// answerChoice is what feed reads of one choice: its index, whether its
// delta (or, in a whole response, its message) carries tool calls, and its
// text (the delta's content, else the choice's text).
type answerChoice struct {
	index      int64
	tools      bool
	content    string
	hasContent bool
	text       string
	hasText    bool
}

// feed reads one chunk's (or a whole response's) JSON: by scanAnswer, or
// by encoding/json when that declines.
func (c *answerCapture) feed(doc []byte) {
	if c.dead || !bytes.Contains(doc, []byte(`"choices"`)) {
		return
	}
	choices, ok := scanAnswer(doc, c.choices[:0])
	if !ok {
		if choices, ok = decodeAnswer(doc, choices[:0]); !ok {
			c.dead = true
			return
		}
	}
	c.write(choices)
}

// write adds the text of one chunk's (or response's) choices, as feed
// read them, to the answer, or ends the capture.
func (c *answerCapture) write(choices []answerChoice) {
	for _, ch := range choices {
		if ch.index != 0 {
			c.dead = true // several choices: which one comes back is unknown
			break
		}
		if ch.tools {
			c.dead = true
			break
		}
		switch {
		case ch.hasContent:
			c.ans.WriteString(ch.content)
		case ch.hasText:
			c.ans.WriteString(ch.text)
		}
	}
	clear(choices) // the texts may point into doc
	c.choices = choices[:0]
}

// decodeAnswer reads doc's choices into choices through encoding/json (ok
// false when doc does not decode): what scanAnswer must agree with.
func decodeAnswer(doc []byte, choices []answerChoice) ([]answerChoice, bool) {
	var p answerPart
	if json.Unmarshal(doc, &p) != nil {
		return choices, false
	}
	for _, ch := range p.Choices {
		d := ch.Delta
		if d == nil {
			d = ch.Message
		}
		a := answerChoice{index: int64(ch.Index)}
		if d != nil {
			a.tools = isSet(d.ToolCalls) || isSet(d.FunctionCall)
			if d.Content != nil {
				a.content, a.hasContent = *d.Content, true
			}
		}
		if ch.Text != nil {
			a.text, a.hasText = *ch.Text, true
		}
		choices = append(choices, a)
	}
	return choices, true
}

// scanAnswer reads doc's choices into choices in one pass, exactly as
// encoding/json would decode them into answerPart, or declines (ok false)
// when doc is anything it does not handle exactly so: not an object,
// duplicate or case-folded field names, an index that is not a plain
// integer, a field of an unexpected type (jsonscan declines the rest). A
// choice's texts point into doc when they need no decoding.
func scanAnswer(doc []byte, choices []answerChoice) ([]answerChoice, bool) {
	s := jsonscan.New(doc)
	ok := s.Object(answerDocFields, func(int) bool {
		var ok bool
		choices, ok = scanChoices(&s, choices)
		return ok
	})
	return choices, ok && s.End()
}

// answerDocFields are the fields of an answer document that feed reads.
var answerDocFields = []string{"choices"}

// scanChoices reads the choices array (or null) at s.
func scanChoices(s *jsonscan.Scanner, choices []answerChoice) ([]answerChoice, bool) {
	if s.Lit("null") {
		return choices, true
	}
	ok := s.Array(func() bool {
		var ch answerChoice
		if !s.Lit("null") && !scanChoice(s, &ch) { // a null choice decodes as the zero choice
			return false
		}
		choices = append(choices, ch)
		return true
	})
	return choices, ok
}

// answerFields are the fields of a choice and of its delta that feed reads.
var (
	choiceFields = []string{"index", "delta", "message", "text"}
	deltaFields  = []string{"content", "tool_calls", "function_call"}
)

// deltaView is what scanDelta read of a delta or message.
type deltaView struct {
	set        bool // present and not null
	tools      bool
	content    string
	hasContent bool
}

func scanChoice(s *jsonscan.Scanner, ch *answerChoice) bool {
	var delta, message deltaView
	ok := s.Object(choiceFields, func(f int) bool {
		switch f {
		case 0:
			if !s.Lit("null") {
				n, ok := s.Int()
				if !ok {
					return false
				}
				ch.index = n
			}
		case 1:
			return scanDelta(s, &delta)
		case 2:
			return scanDelta(s, &message)
		case 3:
			if !s.Lit("null") {
				t, ok := scanText(s)
				if !ok {
					return false
				}
				ch.text, ch.hasText = t, true
			}
		}
		return true
	})
	if !ok {
		return false
	}
	d := delta
	if !d.set {
		d = message
	}
	ch.tools, ch.content, ch.hasContent = d.tools, d.content, d.hasContent
	return true
}

func scanDelta(s *jsonscan.Scanner, d *deltaView) bool {
	if s.Lit("null") {
		return true
	}
	d.set = true
	return s.Object(deltaFields, func(f int) bool {
		if f == 0 {
			if !s.Lit("null") {
				t, ok := scanText(s)
				if !ok {
					return false
				}
				d.content, d.hasContent = t, true
			}
			return true
		}
		v, ok := s.Skip()
		if ok && isSet(v) {
			d.tools = true
		}
		return ok
	})
}

// scanText reads a string value (anything else declines).
func scanText(s *jsonscan.Scanner) (string, bool) {
	lit, esc, ok := s.String()
	if !ok {
		return "", false
	}
	return jsonscan.Text(lit, esc)
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
