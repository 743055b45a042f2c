package caddymodule

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestAnswerEnd is a table of answers and whether each reached its
// protocol's end, each fed through the usage sniffer whole and one byte
// at a time (an end split across writes is still seen); it counts the
// cases accepted.
func TestAnswerEnd(t *testing.T) {
	const chunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	cases := []struct {
		name     string
		endpoint policies.Endpoint
		ctype    string
		body     string
		cut      bool
	}{
		{"chat with [DONE]", policies.EndpointChat, "text/event-stream", chunk + "data: [DONE]\n\n", false},
		{"chat without [DONE]", policies.EndpointChat, "text/event-stream", chunk, true},
		{"chat with a finish reason but no [DONE]", policies.EndpointChat, "text/event-stream",
			chunk + "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", true},
		{"completions, CRLF lines", policies.EndpointCompletions, "text/event-stream; charset=utf-8", "data: {\"choices\":[]}\r\n\r\ndata:[DONE]\r\n\r\n", false},
		{"messages with message_stop", policies.EndpointMessages, "text/event-stream",
			"event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n", false},
		{"messages, message_stop as data only", policies.EndpointMessages, "text/event-stream", "data: {\"type\": \"message_stop\"}\n\n", false},
		{"messages with an error event", policies.EndpointMessages, "text/event-stream",
			"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n", false},
		{"messages cut after a delta", policies.EndpointMessages, "text/event-stream",
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"message_stop\"}}\n\n", true},
		{"responses completed", policies.EndpointResponses, "text/event-stream",
			"event: response.created\ndata: {\"type\":\"response.created\"}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\"}\n\n", false},
		{"responses incomplete", policies.EndpointResponses, "text/event-stream", "data: {\"type\":\"response.incomplete\"}\n\n", false},
		{"responses cut", policies.EndpointResponses, "text/event-stream",
			"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\"}\n\n", true},
		{"responses, a completed prefix is not the end", policies.EndpointResponses, "text/event-stream", "data: {\"type\":\"response.completedx\"}\n\n", true},
		{"json whole", policies.EndpointChat, "application/json", `{"choices":[{"message":{"content":"a } ] \" {"}}],"usage":{}}` + "\n", false},
		{"json cut", policies.EndpointChat, "application/json", `{"choices":[{"message":{"content":"a }`, true},
		{"json cut inside an escape", policies.EndpointMessages, "application/json", `{"content":"a \"`, true},
		{"json closed inner value only", policies.EndpointChat, "application/json", `{"a":{"b":1}`, true},
		{"json with bytes after it", policies.EndpointChat, "application/json", `{"a":1}{"b":2}`, true},
		{"json empty", policies.EndpointChat, "application/json", ``, true},
		{"another endpoint's stream is not checked", policies.EndpointUnknown, "text/event-stream", chunk, false},
		{"another endpoint's JSON is not checked", policies.EndpointUnknown, "application/json", `{"a":`, false},
		{"plain text is not checked", policies.EndpointChat, "text/plain", `{"a":`, false},
	}
	accepted := 0
	for _, c := range cases {
		for _, bytewise := range []bool{false, true} {
			for _, strip := range []bool{false, true} {
				s := &usageSniffer{strip: strip}
				s.start(c.ctype)
				s.end.startEnd(c.endpoint, s.sse, s.json, "")
				if bytewise {
					for i := range len(c.body) {
						s.observe([]byte{c.body[i]})
					}
				} else {
					s.observe([]byte(c.body))
				}
				if assert.Equal(t, c.cut, s.end.cut(), "%s (bytewise %v, strip %v)", c.name, bytewise, strip) {
					accepted++
				}
			}
		}
	}
	assert.Equal(t, 4*len(cases), accepted)

	for _, last := range []string{"data: [DONE]", "data: [DONE]\r"} {
		w := &routeWriter{status: 200, sniff: &usageSniffer{}}
		w.sniff.start("text/event-stream")
		w.sniff.end.startEnd(policies.EndpointChat, true, false, "")
		w.sniff.observe([]byte(chunk + last))
		assert.False(t, w.answerCut(), "a last line without its line break: %q", last)
	}

	var e answerEnd
	e.startEnd(policies.EndpointChat, false, true, "gzip")
	e.jsonBytes([]byte{0x1f, 0x8b})
	assert.False(t, e.cut(), "a compressed answer is not read")
}

// checkJSONEnd holds jsonBytes to encoding/json on doc: a valid JSON
// object is whole, and so is no strict prefix of one that ends before its
// closing brace (white space after the object aside); it reports whether
// doc was a valid object.
func checkJSONEnd(t *testing.T, doc []byte) bool {
	var obj map[string]any
	if t := bytes.TrimLeft(doc, " \t\r\n"); len(t) == 0 || t[0] != '{' || json.Unmarshal(doc, &obj) != nil {
		return false
	}
	feed := func(b []byte) bool {
		var e answerEnd
		e.startEnd(policies.EndpointChat, false, true, "")
		e.jsonBytes(b)
		return e.cut()
	}
	if feed(doc) {
		t.Fatalf("a valid object read as cut: %q", doc)
	}
	end := len(bytes.TrimRight(doc, " \t\r\n"))
	for i := range end {
		if !feed(doc[:i]) {
			t.Fatalf("a prefix of %d bytes of a valid object read as whole: %q", i, doc)
		}
	}
	return true
}

// TestJSONEndAgainstEncodingJSON runs checkJSONEnd over the answers of
// the answer and usage scanners' tests, counting the objects checked.
func TestJSONEndAgainstEncodingJSON(t *testing.T) {
	objects := 0
	for _, d := range append(append([]string{}, answerDocs...), `{"a":"}\"{[","b":[{},[]]} `, `{}`) {
		if checkJSONEnd(t, []byte(d)) {
			objects++
		}
	}
	assert.Greater(t, objects, 10)
}

func FuzzJSONEnd(f *testing.F) {
	for _, d := range answerDocs {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, doc []byte) { checkJSONEnd(t, doc) })
}
