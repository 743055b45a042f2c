package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ParseConfig holds what Parse needs beyond the request itself.
type ParseConfig struct {
	// Deployment identifies the serving deployment (for example the route
	// or upstream pool). It is hashed into every key, so two deployments
	// that happen to serve the same model never share a prefix.
	Deployment string
	// BlockSize is the size in bytes of a hashed block of the rendered
	// prompt; 0 selects DefaultBlockSize. Smaller blocks locate a shared
	// prefix more precisely but cost more index entries and Match steps
	// per byte of prompt.
	BlockSize int
	// MaxBlocks caps the chain; 0 selects DefaultMaxBlocks. A larger cap
	// follows longer prompts at the cost of index memory and Pick time.
	MaxBlocks int
}

// withDefaults fills zero (or negative) knobs with their defaults.
func (c ParseConfig) withDefaults() ParseConfig {
	if c.BlockSize <= 0 {
		c.BlockSize = DefaultBlockSize
	}
	if c.MaxBlocks <= 0 {
		c.MaxBlocks = DefaultMaxBlocks
	}
	return c
}

var (
	// ErrMalformedJSON means the body of a known endpoint is not a JSON
	// object (or not valid JSON, or nested deeper than encoding/json
	// allows). The caller answers 400.
	ErrMalformedJSON = errors.New("llmroute: request body is not a JSON object")
	// ErrMissingModel means the body of a known endpoint has no non-empty
	// "model" string. The caller answers 400.
	ErrMissingModel = errors.New(`llmroute: request body has no "model" string`)
)

// Reasons Parse gives in Request.NoPrefix. A request with a reason has zero
// Keys and is routed by load alone.
const (
	NoPrefixEndpoint      = "unsupported endpoint"
	NoPrefixNoMessages    = "no messages"
	NoPrefixMessagesShape = "messages is not an array of objects"
	NoPrefixRoleShape     = "message role is not a string"
	NoPrefixContentShape  = "message content has an unexpected shape"
	NoPrefixNoPrompt      = "no prompt"
	NoPrefixPromptShape   = "prompt has an unexpected shape"
	NoPrefixNoInput       = "no input"
	NoPrefixInputShape    = "input has an unexpected shape"
	NoPrefixBodyShape     = "body has an unexpected shape"
)

// useFastChat turns the one-pass fast paths (chat, messages, responses) on; tests
// compare them with the general path.
var useFastChat = true

// endpointOf maps a URL path to its Endpoint, tolerating one trailing slash.
func endpointOf(path string) Endpoint {
	switch strings.TrimSuffix(path, "/") {
	case "/v1/chat/completions":
		return EndpointChat
	case "/v1/completions":
		return EndpointCompletions
	case "/v1/responses":
		return EndpointResponses
	case "/v1/messages":
		return EndpointMessages
	case "/v1/messages/count_tokens":
		return EndpointCountTokens
	}
	return EndpointUnknown
}

// isObject reports whether body's first non-space byte opens an object.
func isObject(body []byte) bool {
	for _, c := range body {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c == '{'
	}
	return false
}

// Parse reads one request body for the given URL path and returns what the
// router needs: model, stream flags and the prefix Keys.
//
// For the known endpoints (chat, completions, responses and Anthropic's
// messages and count_tokens) it returns ErrMalformedJSON when body is not
// a JSON object and ErrMissingModel when it has no model string; every other
// odd shape only sets Request.NoPrefix. Any other path yields
// EndpointUnknown with NoPrefix set, model and stream filled in when the
// body is a JSON object, and never an error.
//
// Parse decodes body once; prompt strings are copied once, by the decoder,
// and their canonical rendering is streamed into the block hasher, which
// holds one block at a time. Blocks is capped at cfg.MaxBlocks but
// PromptBytes counts the whole rendering.
func Parse(path string, body []byte, cfg ParseConfig) (*Request, error) {
	cfg = cfg.withDefaults()
	req := &Request{Endpoint: endpointOf(path)}
	switch req.Endpoint {
	case EndpointChat:
		if useFastChat {
			if r, ok := fastChat(body, cfg); ok {
				return r, nil
			}
		}
		var b chatBody
		bad, err := decode(body, &b, &b.commonBody, req)
		switch {
		case err != nil:
			return nil, err
		case bad == "messages":
			req.NoPrefix = NoPrefixMessagesShape
		case bad != "":
			req.NoPrefix = NoPrefixBodyShape
		default:
			keysChat(req, &b, cfg, len(body))
		}
	case EndpointCompletions:
		var b completionsBody
		bad, err := decode(body, &b, &b.commonBody, req)
		switch {
		case err != nil:
			return nil, err
		case bad != "":
			req.NoPrefix = NoPrefixBodyShape
		default:
			keysCompletions(req, &b, cfg, len(body))
		}
	case EndpointResponses:
		if useFastChat {
			if r, ok := fastResponses(body, cfg); ok {
				return r, nil
			}
		}
		var b responsesBody
		bad, err := decode(body, &b, &b.commonBody, req)
		req.PreviousResponseID, req.Conversation = b.PreviousResponseID.str(), b.Conversation.id
		for i := range b.Input {
			if it := &b.Input[i]; it.Role.str() == "assistant" || it.Type.str() == "function_call_output" {
				req.InputHasHistory = true
			}
		}
		var text *jsonText
		switch {
		case err != nil:
			return nil, err
		case bad == "input":
			// Not an array of items: look again for a string.
			var t responsesText
			if json.Unmarshal(body, &t) != nil || t.Input.kind != shapeString {
				req.NoPrefix = NoPrefixInputShape
				break
			}
			text = &t.Input
			fallthrough
		case bad == "":
			keysResponses(req, &b, text, cfg, len(body))
		default:
			req.NoPrefix = NoPrefixBodyShape
		}
	case EndpointMessages, EndpointCountTokens:
		if useFastChat && req.Endpoint == EndpointMessages {
			if r, ok := fastMessages(body, cfg); ok {
				return r, nil
			}
		}
		if err := parseMessages(req, body, cfg); err != nil {
			return nil, err
		}
	default:
		req.NoPrefix = NoPrefixEndpoint
		var b commonBody
		if isObject(body) && json.Unmarshal(body, &b) == nil {
			fillCommon(req, &b)
		}
	}
	req.OutputLimit = outputLimitOf(body) // the fast paths returned theirs above
	return req, nil
}

// decode unmarshals a known endpoint's body into v, whose common fields are
// c, and fills req's common fields. A value of the wrong type for one of
// v's typed arrays is not an error: decode returns the name of its
// top-level field (say "messages") and the rest of v is filled.
func decode(body []byte, v any, c *commonBody, req *Request) (badField string, err error) {
	if !isObject(body) {
		return "", ErrMalformedJSON
	}
	err = json.Unmarshal(body, v)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		badField, _, _ = strings.Cut(te.Field, ".")
		if badField == "" {
			badField = "?"
		}
		err = nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrMalformedJSON, err)
	}
	if c.Model.str() == "" {
		return "", ErrMissingModel
	}
	fillCommon(req, c)
	return badField, nil
}

// fillCommon copies the fields every endpoint shares into req.
func fillCommon(req *Request, c *commonBody) {
	req.Model = c.Model.str()
	req.Stream = bool(c.Stream)
	req.IncludeUsage = bool(c.StreamOptions.IncludeUsage)
	req.HasStreamOptions = c.StreamOptions.Present
	req.CacheSalt = c.CacheSalt.str()
	req.PromptCacheKey = c.PromptCacheKey.str()
	req.OutputLimit = c.limits.product()
}

// isSystem reports whether a role belongs to the leading system run.
func isSystem(role string) bool { return role == "system" || role == "developer" }

func keysChat(req *Request, b *chatBody, cfg ParseConfig, sizeHint int) {
	msgs := b.Messages
	if len(msgs) == 0 {
		req.NoPrefix = NoPrefixNoMessages
		return
	}
	for i := range msgs {
		if msgs[i].Role.str() == "" {
			req.NoPrefix = NoPrefixRoleShape
			return
		}
		if msgs[i].Content.kind == shapeOther {
			req.NoPrefix = NoPrefixContentShape
			return
		}
	}

	var k keyChain
	k.init(cfg, req, toolsCanonical(&b.commonBody), sizeHint)
	for i := range msgs {
		if !isSystem(msgs[i].Role.s) {
			k.endLeadingRun()
		}
		renderChatMessage(&k.sink, &msgs[i])
	}
	k.setKeys(req, answerMessage)
}

func keysCompletions(req *Request, b *completionsBody, cfg ParseConfig, sizeHint int) {
	switch b.Prompt.kind {
	case shapeAbsent:
		req.NoPrefix = NoPrefixNoPrompt
		return
	case shapeOther:
		req.NoPrefix = NoPrefixPromptShape
		return
	}
	var k keyChain
	k.init(cfg, req, toolsCanonical(&b.commonBody), sizeHint)
	k.endLeadingRun() // a prompt has no leading run
	renderPrompt(&k.sink, &b.Prompt)
	// Only a single string prompt is continued by its completion's text;
	// arrays and token ids have no one continuation.
	kind := answerNone
	if b.Prompt.kind == shapeString {
		kind = answerText
	}
	k.setKeys(req, kind)
}

// keysResponses follows keysChat: instructions render as a system message
// and, with any system/developer items that open the input, form the
// leading run. text is the input when it is a string.
func keysResponses(req *Request, b *responsesBody, text *jsonText, cfg ParseConfig, sizeHint int) {
	items := b.Input
	if text == nil && len(items) == 0 {
		req.NoPrefix = NoPrefixNoInput
		return
	}
	for i := range items {
		it := &items[i]
		if it.kind() != "message" {
			continue
		}
		if it.Role.str() == "" {
			req.NoPrefix = NoPrefixRoleShape
			return
		}
		if it.Content.kind == shapeOther {
			req.NoPrefix = NoPrefixContentShape
			return
		}
	}

	// The tools follow the leading run, as in keysChat.
	var k keyChain
	k.init(cfg, req, toolsCanonical(&b.commonBody), sizeHint)
	if b.Instructions.kind != shapeAbsent {
		header(&k.sink, "system")
		b.Instructions.render(&k.sink)
		k.WriteString(endTag)
	}
	if text != nil {
		k.endLeadingRun()
		renderText(&k.sink, "user", text.s)
		k.setKeys(req, answerMessage)
		return
	}
	for i := range items {
		it := &items[i]
		if it.kind() != "message" || !isSystem(it.Role.s) {
			k.endLeadingRun()
		}
		renderItem(&k.sink, it)
	}
	k.setKeys(req, answerMessage)
}

// keyChain is a request's chain while its keys are made: the sink, seeded
// with the leading key's fields, and the leading run, which the chain
// renders first and the leading key then identifies by the chain's state
// (sink.sofar); the request's tools follow the run.
type keyChain struct {
	sink
	fields     leadingFields
	tools      []byte
	leading    uint64
	leadBlocks int // the blocks within the leading run; -1 while it is open
}

// init starts req's chain, its leading run open.
func (k *keyChain) init(cfg ParseConfig, req *Request, tools []byte, sizeHint int) {
	k.fields, k.tools, k.leadBlocks = newLeadingFields(cfg.Deployment, req.Model, req.CacheSalt), tools, -1
	k.initChain(k.fields.key(0), cfg.BlockSize, cfg.MaxBlocks, sizeHint)
}

// endLeadingRun ends the leading run where the rendering is, unless it
// ended before: the leading key takes its identity, and the tools follow
// it.
func (k *keyChain) endLeadingRun() {
	if k.leadBlocks >= 0 {
		return
	}
	k.leading, k.leadBlocks = k.fields.key(k.sofar()), len(k.blocks)
	renderTools(&k.sink, k.tools)
}

// setKeys stores the chain's result in req, the leading run ended if it
// had not (a prompt of system messages only); an answer continues it as
// kind says.
func (k *keyChain) setKeys(req *Request, kind answerKind) {
	k.endLeadingRun()
	req.Keys = Keys{Leading: k.leading, Blocks: k.blocks, BlockBytes: k.size, LeadingBlocks: k.leadBlocks,
		Bytes: k.total, end: k.end(kind)}
	req.PromptBytes = k.total
}
