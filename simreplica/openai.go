package simreplica

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// apiKind says which API a request is for.
type apiKind int

const (
	apiChat apiKind = iota + 1
	apiCompletions
	apiMessages    // Anthropic's /v1/messages (anthropic.go)
	apiCountTokens // Anthropic's /v1/messages/count_tokens
	apiResponses   // OpenAI's /v1/responses (responses.go)
)

// genRequest is what the server needs from a chat or completions body.
type genRequest struct {
	kind         apiKind
	model        string
	stream       bool
	includeUsage bool
	maxTokens    int // 0: not given
	prompt       string
	promptTokens []uint32 // set when the prompt was given as token ids

	// previousID and conversation are a /v1/responses body's
	// previous_response_id and conversation id ("" for none).
	previousID   string
	conversation string
}

// badRequest is a client error with the OpenAI "param" it concerns.
type badRequest struct {
	msg   string
	param string
}

// Error returns the message sent to the client.
func (e *badRequest) Error() string { return e.msg }

func bad(param, format string, args ...any) error {
	return &badRequest{msg: fmt.Sprintf(format, args...), param: param}
}

// commonFields are the fields both APIs share.
type commonFields struct {
	Model         *string `json:"model"`
	Stream        bool    `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
}

func (c *commonFields) fill(g *genRequest) error {
	if c.Model == nil || *c.Model == "" {
		return bad("model", "you must provide a model parameter")
	}
	g.model = *c.Model
	g.stream = c.Stream
	g.includeUsage = c.Stream && c.StreamOptions != nil && c.StreamOptions.IncludeUsage
	mt := c.MaxCompletionTokens
	if mt == nil {
		mt = c.MaxTokens
	}
	if mt != nil {
		if *mt < 1 {
			return bad("max_tokens", "max_tokens must be at least 1, got %d", *mt)
		}
		g.maxTokens = *mt
	}
	return nil
}

// parseChat reads a /v1/chat/completions body and renders its messages
// with the chat template: "<|role|>\ncontent\n" per message, then the
// generation prompt "<|assistant|>\n".
func parseChat(body []byte) (*genRequest, error) {
	var req struct {
		commonFields
		Messages json.RawMessage `json:"messages"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	g := &genRequest{kind: apiChat}
	if err := req.fill(g); err != nil {
		return nil, err
	}
	if len(req.Messages) == 0 || string(req.Messages) == "null" {
		return nil, bad("messages", "you must provide a messages parameter")
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(req.Messages, &msgs); err != nil {
		return nil, bad("messages", "messages must be an array of message objects")
	}
	if len(msgs) == 0 {
		return nil, bad("messages", "messages must not be empty")
	}
	turns := make([]turn, 0, len(msgs))
	for i, m := range msgs {
		if m.Role == "" {
			return nil, bad("messages", "messages[%d].role is required", i)
		}
		content, err := renderContent(m.Content)
		if err != nil {
			return nil, bad("messages", "messages[%d].content: %v", i, err)
		}
		turns = append(turns, turn{m.Role, content})
	}
	g.prompt = chatTemplate(turns)
	return g, nil
}

// turn is one message as the chat template sees it.
type turn struct{ role, content string }

// chatTemplate renders turns with the chat template: "<|role|>\ncontent\n"
// per message, then the generation prompt "<|assistant|>\n". Every API
// renders through it, so that one conversation shares the cache whichever
// API carried it.
func chatTemplate(turns []turn) string {
	var b strings.Builder
	for _, t := range turns {
		b.WriteString("<|" + t.role + "|>\n" + t.content + "\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// renderContent renders a message content: a string, null, or an array of
// parts where text parts contribute their text and other parts a
// "<|type|>" placeholder.
func renderContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			b.WriteString(p.Text)
		case "":
			return "", errors.New("content part without a type")
		default:
			b.WriteString("<|" + p.Type + "|>")
		}
	}
	return b.String(), nil
}

// parseCompletions reads a /v1/completions body. The prompt is a string,
// an array of one string, or an array of token ids (used as they are).
func parseCompletions(body []byte) (*genRequest, error) {
	var req struct {
		commonFields
		Prompt json.RawMessage `json:"prompt"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	g := &genRequest{kind: apiCompletions}
	if err := req.fill(g); err != nil {
		return nil, err
	}
	raw := bytes.TrimSpace(req.Prompt)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, bad("prompt", "you must provide a prompt parameter")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		g.prompt = s
		return g, nil
	}
	var ss []string
	if json.Unmarshal(raw, &ss) == nil {
		if len(ss) != 1 {
			return nil, bad("prompt", "only one prompt per request is supported, got %d", len(ss))
		}
		g.prompt = ss[0]
		return g, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		g.promptTokens = ids
		return g, nil
	}
	return nil, bad("prompt", "prompt must be a string, an array of one string or an array of token ids")
}

// decodeJSON unmarshals a JSON object body, mapping errors to 400s.
func decodeJSON(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return bad("", "request body is empty; expected a JSON object")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return bad("", "malformed JSON body: %v", err)
	}
	return nil
}

// tokens returns the request's prompt tokens.
func (g *genRequest) tokens() []uint32 {
	if g.promptTokens != nil {
		return g.promptTokens
	}
	return simengine.Tokenize(g.prompt)
}

// apiUsage is the OpenAI usage object.
type apiUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
	// PromptTokensDetails is written as the engine does (Personality).
	PromptTokensDetails *cachedDetails `json:"prompt_tokens_details,omitempty"`
}

// cachedDetails is prompt_tokens_details.
type cachedDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// chatMessage is an assistant message (non-streaming) or delta (streaming).
type chatMessage struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// chatChoice is one choice of a chat.completion or chat.completion.chunk.
type chatChoice struct {
	Index        int          `json:"index"`
	Message      *chatMessage `json:"message,omitempty"`
	Delta        *chatMessage `json:"delta,omitempty"`
	Logprobs     any          `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
}

// textChoice is one choice of a text_completion (streamed or not).
type textChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// apiResponse is any response or chunk object; Choices holds []chatChoice
// or []textChoice (empty, not null, in the usage chunk).
type apiResponse struct {
	ID      string    `json:"id"`
	Object  string    `json:"object"`
	Created int64     `json:"created"`
	Model   string    `json:"model"`
	Choices any       `json:"choices"`
	Usage   *apiUsage `json:"usage,omitempty"`
}

func strPtr(s string) *string { return &s }
