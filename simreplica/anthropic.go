package simreplica

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// Anthropic's Messages API, as vLLM, SGLang and llama.cpp serve it beside
// the OpenAI API: POST /v1/messages (JSON, or SSE from message_start to
// message_stop, with usage from the cache model: input_tokens are the
// prompt tokens not read from the cache, cache_read_input_tokens those
// that were) and POST /v1/messages/count_tokens. A body renders with the
// chat template as the chat request of the same conversation does (system
// first, each tool_result as a "tool" message before the rest of its turn),
// so that both share the cache.

// anthropicBlock is one content block, with the fields the template uses.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
}

// anthropicText renders an Anthropic content (a string, null or blocks)
// like chat's renderContent: text blocks their text, other blocks a
// "<|type|>" placeholder (an image as chat's image_url), tool_use nothing
// (chat's tool_calls are not rendered either). Tool results are returned
// apart, in order, with their tool_use_id.
func anthropicText(raw json.RawMessage) (text string, results []turn, err error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	if raw[0] == '"' {
		err = json.Unmarshal(raw, &text)
		return text, nil, err
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", nil, errors.New("must be a string or an array of content blocks")
	}
	var b strings.Builder
	for _, bl := range blocks {
		switch bl.Type {
		case "":
			return "", nil, errors.New("content block without a type")
		case "text":
			b.WriteString(bl.Text)
		case "tool_use":
		case "tool_result":
			res, _, err := anthropicText(bl.Content)
			if err != nil {
				return "", nil, fmt.Errorf("tool_result: %w", err)
			}
			results = append(results, turn{"tool", res})
		case "image":
			b.WriteString("<|image_url|>")
		default:
			b.WriteString("<|" + bl.Type + "|>")
		}
	}
	return b.String(), results, nil
}

// parseMessages reads a /v1/messages (or count_tokens) body.
func parseMessages(body []byte) (*genRequest, error) {
	var req struct {
		commonFields
		System   json.RawMessage `json:"system"`
		Messages json.RawMessage `json:"messages"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	g := &genRequest{kind: apiMessages}
	if err := req.fill(g); err != nil {
		return nil, err
	}
	g.includeUsage = false // Anthropic streams always carry usage
	if len(req.Messages) == 0 || string(req.Messages) == "null" {
		return nil, bad("messages", "messages: Field required")
	}
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(req.Messages, &msgs); err != nil {
		return nil, bad("messages", "messages: Input should be a valid list of messages")
	}
	if len(msgs) == 0 {
		return nil, bad("messages", "messages: at least one message is required")
	}
	var turns []turn
	sys, _, err := anthropicText(req.System)
	if err != nil {
		return nil, bad("system", "system: %v", err)
	}
	if sys != "" {
		turns = append(turns, turn{"system", sys})
	}
	for i, m := range msgs {
		if m.Role == "" {
			return nil, bad("messages", "messages.%d.role: Field required", i)
		}
		text, results, err := anthropicText(m.Content)
		if err != nil {
			return nil, bad("messages", "messages.%d.content: %v", i, err)
		}
		turns = append(turns, results...)
		if len(results) == 0 || text != "" {
			turns = append(turns, turn{m.Role, text})
		}
	}
	g.prompt = chatTemplate(turns)
	return g, nil
}

// handleCountTokens serves POST /v1/messages/count_tokens:
// {"input_tokens": n}.
func (s *Server) handleCountTokens(w http.ResponseWriter, r *http.Request) {
	body, _, ok := s.prelude(w, r, apiCountTokens)
	if !ok {
		return
	}
	g, err := parseMessages(body)
	if err != nil {
		s.counts.inc(cntRejected)
		apiCountTokens.writeBadRequest(w, err)
		return
	}
	s.counts.inc(cntCompleted)
	writeJSON(w, http.StatusOK, map[string]int{"input_tokens": len(g.tokens())})
}

// anthropicUsage is Anthropic's usage object.
type anthropicUsage struct {
	InputTokens              int  `json:"input_tokens"`
	CacheCreationInputTokens int  `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int `json:"cache_read_input_tokens,omitempty"`
	OutputTokens             int  `json:"output_tokens"`
}

// anthropicMessage is a message object (the JSON answer, and
// message_start's message).
type anthropicMessage struct {
	ID           string           `json:"id"`
	Type         string           `json:"type"`
	Role         string           `json:"role"`
	Model        string           `json:"model"`
	Content      []map[string]any `json:"content"`
	StopReason   *string          `json:"stop_reason"`
	StopSequence *string          `json:"stop_sequence"`
	Usage        anthropicUsage   `json:"usage"`
}

// stopReason is Anthropic's stop_reason for an engine finish reason.
func stopReason(r simengine.FinishReason) string {
	if r == simengine.FinishLength {
		return "max_tokens"
	}
	return "end_turn"
}

// anthropicFormat writes Anthropic's answers.
type anthropicFormat struct{}

func (anthropicFormat) message(g *generation, content []map[string]any, u anthropicUsage, stop *string) anthropicMessage {
	return anthropicMessage{ID: g.respID, Type: "message", Role: "assistant", Model: g.req.model,
		Content: content, StopReason: stop, Usage: u}
}

// open writes message_start (with the prompt's usage), the text block's
// start and a ping.
func (f anthropicFormat) open(g *generation, cached int) error {
	u := g.s.cfg.Personality.anthropicUsage(len(g.prompt), cached, 0)
	start := map[string]any{"type": "message_start", "message": f.message(g, []map[string]any{}, u, nil)}
	if err := g.writeNamed("message_start", start); err != nil {
		return err
	}
	block := map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}
	if err := g.writeNamed("content_block_start", block); err != nil {
		return err
	}
	return g.writeNamed("ping", map[string]any{"type": "ping"})
}

func (anthropicFormat) token(g *generation, text string, _ *simengine.Event) error {
	return g.writeNamed("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
		"delta": map[string]any{"type": "text_delta", "text": text}})
}

// close writes the block's stop, message_delta (stop reason and the
// final usage) and message_stop.
func (anthropicFormat) close(g *generation, ev simengine.Event) error {
	if err := g.writeNamed("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}); err != nil {
		return err
	}
	u := ev.Usage
	delta := map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": stopReason(ev.Reason), "stop_sequence": nil},
		"usage": g.s.cfg.Personality.anthropicUsage(u.PromptTokens, u.CachedTokens, u.CompletionTokens)}
	if err := g.writeNamed("message_delta", delta); err != nil {
		return err
	}
	return g.writeNamed("message_stop", map[string]any{"type": "message_stop"})
}

func (f anthropicFormat) whole(g *generation, text string, ev simengine.Event) any {
	u := ev.Usage
	stop := stopReason(ev.Reason)
	return f.message(g, []map[string]any{{"type": "text", "text": text}},
		g.s.cfg.Personality.anthropicUsage(u.PromptTokens, u.CachedTokens, u.CompletionTokens), &stop)
}
