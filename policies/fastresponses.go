package policies

import (
	"strings"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
)

// fastResponses is fastChat's counterpart for the Responses API
// (/v1/responses, what Codex-style agents send): one pass with the
// module's own scanner instead of encoding/json, filling the same
// responsesBody for the same keysResponses. What it does not handle
// exactly as encoding/json would (a non-string where a string is expected,
// an output that is not a string, duplicate fields, case-folded keys,
// escapes in keys) declines, and Parse falls back to the general path.
// FuzzFastResponses checks it against the general path.

var responsesTop = topNames("instructions", "input", "previous_response_id", "conversation")

const (
	rInstructions = nCommon + iota
	rInput
	rPreviousResponseID
	rConversation
)

const (
	iType = iota
	iRole
	iContent
	iID
	iName
	iCallID
	iArguments
	iOutput
	iSummary
	iEncrypted
)

var (
	itemNames = []string{iType: "type", iRole: "role", iContent: "content", iID: "id", iName: "name", iCallID: "call_id",
		iArguments: "arguments", iOutput: "output", iSummary: "summary", iEncrypted: "encrypted_content"}
	idNames = []string{"id"}
)

// fastResponses parses a /v1/responses body in one pass, or declines.
func fastResponses(body []byte, cfg ParseConfig) (*Request, bool) {
	s := newReader(body)
	var b responsesBody
	defer func() {
		b.release()
		if sb := s.scratchBufs; sb != nil {
			clear(b.Input) // the pool must not keep the body alive
			if cap(b.Input) > cap(sb.items) {
				sb.items = b.Input[:0] // it grew: keep it
			}
		}
		s.release()
	}()
	var input *jsonText // the input when it is a string
	gotInput := false
	ok := s.Object(responsesTop, func(i int) bool {
		switch i {
		case rInstructions:
			return s.textField(&b.Instructions)
		case rPreviousResponseID:
			if !s.textField(&b.PreviousResponseID) {
				return false
			}
			b.PreviousResponseID.s = strings.Clone(b.PreviousResponseID.s)
			return true
		case rConversation:
			return s.conversation(&b.Conversation)
		case rInput:
			gotInput = true
			if s.Peek() == '"' {
				input = &jsonText{}
				return s.textField(input)
			}
			return s.items(&b.Input)
		}
		return s.commonField(i, &b.commonBody)
	})
	if !ok || !s.End() || b.Model.kind != shapeString || !gotInput {
		return nil, false
	}
	req := &Request{Endpoint: EndpointResponses}
	fillCommon(req, &b.commonBody)
	req.PreviousResponseID, req.Conversation = b.PreviousResponseID.str(), b.Conversation.id
	for i := range b.Input {
		if it := &b.Input[i]; it.Role.str() == "assistant" || it.Type.str() == "function_call_output" {
			req.InputHasHistory = true
		}
	}
	keysResponses(req, &b, input, cfg, len(body))
	return req, req.NoPrefix == ""
}

// conversation reads the conversation field: an id, or an object with an
// id (null: none).
func (s *reader) conversation(c *conversation) bool {
	*c = conversation{}
	var id string
	// The id names a session: decoded exactly as encoding/json decodes it
	// (invalid UTF-8 replaced), unlike rendered text.
	exact := func() bool {
		if s.Lit("null") {
			id = ""
			return true
		}
		lit, esc, ok := s.String()
		if ok {
			id, ok = jsonscan.Text(lit, esc)
		}
		return ok
	}
	if s.Peek() == '{' {
		if !s.Object(idNames, func(int) bool { return exact() }) {
			return false
		}
	} else if !exact() {
		return false
	}
	c.id = strings.Clone(id)
	return true
}

// items reads the input array: items of any type with the fields the
// rendering reads.
func (s *reader) items(out *[]responseItem) bool {
	if s.Peek() != '[' {
		return false // null, or another shape: the general path
	}
	list := s.scratch().items[:0] // pooled: the items do not outlive the parse
	ok := s.Array(func() bool {
		list = append(list, responseItem{})
		it := &list[len(list)-1]
		return s.Object(itemNames, func(i int) bool {
			switch i {
			case iType:
				return s.textField(&it.Type)
			case iRole:
				return s.textField(&it.Role)
			case iContent:
				return s.content(&it.Content)
			case iID:
				return s.textField(&it.ID)
			case iName:
				return s.textField(&it.Name)
			case iCallID:
				return s.textField(&it.CallID)
			case iArguments:
				return s.lazyText(&it.Arguments)
			case iOutput:
				return s.lazyText(&it.Output)
			case iSummary:
				return s.rawValue(&it.Summary)
			case iEncrypted:
				return s.textField(&it.Encrypted)
			}
			return false
		})
	})
	*out = list
	return ok
}
