package policies

import "strings"

// fastResponses is fastChat's counterpart for the Responses API
// (/v1/responses, what Codex-style agents send): one pass with the
// module's own scanner instead of encoding/json, filling the same
// responsesBody for the same keysResponses. What it does not handle
// exactly as encoding/json would (a non-string where a string is expected,
// an output that is not a string, duplicate fields, case-folded keys,
// escapes in keys) declines, and Parse falls back to the general path.
// FuzzFastResponses checks it against the general path.

var (
	responsesTop = []string{"model", "stream", "stream_options", "cache_salt", "prompt_cache_key", "tools", "functions",
		"instructions", "input", "previous_response_id", "conversation"}
	itemFields = []string{"type", "role", "content", "id", "name", "call_id", "arguments", "output", "summary", "encrypted_content"}
	idFields   = []string{"id"}
)

// fastResponses parses a /v1/responses body in one pass, or declines.
func fastResponses(body []byte, cfg ParseConfig) (*Request, bool) {
	s := &fscan{b: body}
	var b responsesBody
	var input *jsonText // the input when it is a string
	gotInput := false
	ok := s.object(responsesTop, func(k string) bool {
		switch k {
		case "instructions":
			return s.textField(&b.Instructions)
		case "previous_response_id":
			if !s.textField(&b.PreviousResponseID) {
				return false
			}
			b.PreviousResponseID.s = strings.Clone(b.PreviousResponseID.s)
			return true
		case "conversation":
			return s.conversation(&b.Conversation)
		case "input":
			gotInput = true
			if s.i < len(s.b) && s.b[s.i] == '"' {
				input = &jsonText{}
				return s.textField(input)
			}
			return s.items(&b.Input)
		}
		return s.commonField(k, &b.commonBody)
	})
	s.ws()
	if !ok || s.i != len(s.b) || b.Model.kind != shapeString || !gotInput {
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

// conversation scans the conversation field: an id, or an object with an
// id (null: none).
func (s *fscan) conversation(c *conversation) bool {
	*c = conversation{}
	var id jsonText
	if s.i < len(s.b) && s.b[s.i] == '{' {
		if !s.object(idFields, func(k string) bool {
			if k == "id" {
				return s.textField(&id)
			}
			_, ok := s.skip()
			return ok
		}) {
			return false
		}
	} else if !s.textField(&id) {
		return false
	}
	c.id = strings.Clone(id.s)
	return true
}

// items scans the input array: items of any type with the fields the
// rendering reads.
func (s *fscan) items(out *[]responseItem) bool {
	if s.i >= len(s.b) || s.b[s.i] != '[' {
		return false // null, or another shape: the general path
	}
	list := []responseItem{}
	ok := s.array(func() bool {
		list = append(list, responseItem{})
		it := &list[len(list)-1]
		return s.object(itemFields, func(k string) bool {
			switch k {
			case "type":
				return s.textField(&it.Type)
			case "role":
				return s.textField(&it.Role)
			case "content":
				return s.content(&it.Content)
			case "id":
				return s.textField(&it.ID)
			case "name":
				return s.textField(&it.Name)
			case "call_id":
				return s.textField(&it.CallID)
			case "arguments":
				return s.textField(&it.Arguments)
			case "output":
				return s.lazyText(&it.Output)
			case "summary":
				return s.rawValue(&it.Summary)
			case "encrypted_content":
				return s.textField(&it.Encrypted)
			}
			_, ok := s.skip()
			return ok
		})
	})
	*out = list
	return ok
}
