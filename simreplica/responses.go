package simreplica

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// OpenAI's Responses API: POST /v1/responses, JSON or SSE (response.created
// ... response.output_text.delta ... response.completed, with usage and
// input_tokens_details.cached_tokens). Its state lives on the replica: each
// response gets a resp_ id unique to this replica and request, and a
// follow-up naming it in previous_response_id continues that conversation
// (its prompt begins with the previous prompt and answer, so it hits the
// cache here and nowhere else); an id this replica did not make, or has
// forgotten, gets OpenAI's 404 previous_response_not_found. A conversation
// id continues the conversation stored under it here (a new id starts
// empty). The record is bounded: the oldest entries are forgotten first.

// maxStored bounds the responses (and, apart, the conversations) a
// replica remembers.
const maxStored = 1024

// storedTokens remembers token sequences by id, forgetting the oldest
// beyond max.
type storedTokens struct {
	max   int
	byID  map[string][]uint32
	order []string // ring of ids in insertion order
	next  int
}

func (st *storedTokens) get(id string) ([]uint32, bool) {
	t, ok := st.byID[id]
	return t, ok
}

func (st *storedTokens) put(id string, toks []uint32) {
	if st.byID == nil {
		st.byID = make(map[string][]uint32)
	}
	if _, ok := st.byID[id]; ok {
		st.byID[id] = toks
		return
	}
	if len(st.order) < st.max {
		st.order = append(st.order, id)
	} else {
		delete(st.byID, st.order[st.next])
		st.order[st.next] = id
		st.next = (st.next + 1) % st.max
	}
	st.byID[id] = toks
}

// responseStore is the state /v1/responses keeps on this replica.
type responseStore struct {
	mu        sync.Mutex
	responses storedTokens
	convs     storedTokens
}

func newResponseStore(max int) *responseStore {
	return &responseStore{responses: storedTokens{max: max}, convs: storedTokens{max: max}}
}

// history returns the tokens a request continues: its previous response's
// or its conversation's (nil for neither); ok is false for a previous
// response this replica does not know.
func (rs *responseStore) history(g *genRequest) (toks []uint32, ok bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case g.previousID != "":
		return rs.responses.get(g.previousID)
	case g.conversation != "":
		toks, _ = rs.convs.get(g.conversation)
	}
	return toks, true
}

// record stores a finished response (its prompt and answer) under its id
// and, when it has one, its conversation's.
func (rs *responseStore) record(g *genRequest, id string, prompt, answer []uint32) {
	toks := make([]uint32, 0, len(prompt)+len(answer))
	toks = append(append(toks, prompt...), answer...)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.responses.put(id, toks)
	if g.conversation != "" {
		rs.convs.put(g.conversation, toks)
	}
}

// responsesItem is one input item, with the fields the template uses.
type responsesItem struct {
	Type    string          `json:"type"`
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
	Output  json.RawMessage `json:"output"`
}

// parseResponses reads a /v1/responses body: instructions render as a
// system message, a string input as a user message, input items as their
// messages (a function_call as an assistant turn, its output as a "tool"
// turn), like the chat request of the same conversation.
func parseResponses(body []byte) (*genRequest, error) {
	var req struct {
		Model              *string         `json:"model"`
		Stream             bool            `json:"stream"`
		MaxOutputTokens    *int            `json:"max_output_tokens"`
		Instructions       *string         `json:"instructions"`
		Input              json.RawMessage `json:"input"`
		PreviousResponseID *string         `json:"previous_response_id"`
		Conversation       json.RawMessage `json:"conversation"`
	}
	if err := decodeJSON(body, &req); err != nil {
		return nil, err
	}
	g := &genRequest{kind: apiResponses, stream: req.Stream}
	if req.Model == nil || *req.Model == "" {
		return nil, bad("model", "you must provide a model parameter")
	}
	g.model = *req.Model
	if mt := req.MaxOutputTokens; mt != nil {
		if *mt < 1 {
			return nil, bad("max_output_tokens", "max_output_tokens must be at least 1, got %d", *mt)
		}
		g.maxTokens = *mt
	}
	if req.PreviousResponseID != nil {
		g.previousID = *req.PreviousResponseID
	}
	if len(req.Conversation) > 0 && string(req.Conversation) != "null" {
		var id string
		if json.Unmarshal(req.Conversation, &id) != nil {
			var o struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(req.Conversation, &o) != nil || o.ID == "" {
				return nil, bad("conversation", "conversation must be an id or an object with an id")
			}
			id = o.ID
		}
		g.conversation = id
	}
	if g.previousID != "" && g.conversation != "" {
		return nil, bad("previous_response_id", "previous_response_id and conversation cannot both be given")
	}
	var turns []turn
	if req.Instructions != nil && *req.Instructions != "" {
		turns = append(turns, turn{"system", *req.Instructions})
	}
	in, err := responsesInput(req.Input)
	if err != nil {
		return nil, err
	}
	g.prompt = chatTemplate(append(turns, in...))
	return g, nil
}

// responsesInput renders input: a string, or an array of items.
func responsesInput(raw json.RawMessage) ([]turn, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, bad("input", "you must provide an input parameter")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []turn{{"user", s}}, nil
	}
	var items []responsesItem
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, bad("input", "input must be a string or an array of input items")
	}
	if len(items) == 0 {
		return nil, bad("input", "input must not be empty")
	}
	turns := make([]turn, 0, len(items))
	for i, it := range items {
		switch {
		case it.Type == "function_call":
			turns = append(turns, turn{"assistant", ""})
		case it.Type == "function_call_output":
			out, err := renderContent(it.Output)
			if err != nil {
				return nil, bad("input", "input[%d].output: %v", i, err)
			}
			turns = append(turns, turn{"tool", out})
		case it.Type == "message" || it.Type == "" && it.Role != "":
			if it.Role == "" {
				return nil, bad("input", "input[%d].role is required", i)
			}
			c, err := renderContent(it.Content)
			if err != nil {
				return nil, bad("input", "input[%d].content: %v", i, err)
			}
			turns = append(turns, turn{it.Role, c})
		case it.Type == "":
			return nil, bad("input", "input[%d] has neither a type nor a role", i)
		default:
			turns = append(turns, turn{it.Type, ""})
		}
	}
	return turns, nil
}

// writeNoPrevious answers OpenAI's 404 for an unknown previous response.
func writeNoPrevious(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, errInvalidRequest, fmt.Sprintf("Previous response with id '%s' not found.", id),
		"previous_response_id", "previous_response_not_found")
}

// responsesUsage is the Responses API's usage object.
type responsesUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

func toResponsesUsage(u simengine.Usage) *responsesUsage {
	r := &responsesUsage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens,
		TotalTokens: u.PromptTokens + u.CompletionTokens}
	r.InputTokensDetails.CachedTokens = u.CachedTokens
	return r
}

// responsesFormat writes the Responses API's answers.
type responsesFormat struct{}

// response is a response object in the given status, with the output
// message when text is given.
func (responsesFormat) response(g *generation, status string, text *string, usage *responsesUsage, reason simengine.FinishReason) map[string]any {
	output := []any{}
	if text != nil {
		output = append(output, map[string]any{"type": "message", "id": g.itemID, "status": "completed", "role": "assistant",
			"content": []any{map[string]any{"type": "output_text", "text": *text, "annotations": []any{}}}})
	}
	r := map[string]any{"id": g.respID, "object": "response", "created_at": g.created, "status": status,
		"model": g.req.model, "output": output, "usage": usage, "error": nil, "incomplete_details": nil,
		"previous_response_id": nil}
	if reason == simengine.FinishLength {
		r["status"] = "incomplete"
		r["incomplete_details"] = map[string]any{"reason": "max_output_tokens"}
	}
	if g.req.previousID != "" {
		r["previous_response_id"] = g.req.previousID
	}
	if g.req.conversation != "" {
		r["conversation"] = map[string]any{"id": g.req.conversation}
	}
	return r
}

// event writes one Responses event, numbered.
func (responsesFormat) event(g *generation, typ string, fields map[string]any) error {
	fields["type"] = typ
	fields["sequence_number"] = g.seq
	g.seq++
	return g.writeNamed(typ, fields)
}

// open writes response.created, response.in_progress and the output
// message's and text part's starts.
func (f responsesFormat) open(g *generation, _ int) error {
	for _, typ := range []string{"response.created", "response.in_progress"} {
		if err := f.event(g, typ, map[string]any{"response": f.response(g, "in_progress", nil, nil, 0)}); err != nil {
			return err
		}
	}
	item := map[string]any{"type": "message", "id": g.itemID, "status": "in_progress", "role": "assistant", "content": []any{}}
	if err := f.event(g, "response.output_item.added", map[string]any{"output_index": 0, "item": item}); err != nil {
		return err
	}
	return f.event(g, "response.content_part.added", map[string]any{"item_id": g.itemID, "output_index": 0, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
}

func (f responsesFormat) token(g *generation, text string, _ *simengine.Event) error {
	g.text.WriteString(text)
	return f.event(g, "response.output_text.delta", map[string]any{"item_id": g.itemID, "output_index": 0,
		"content_index": 0, "delta": text})
}

// close writes the text's, part's and item's ends and response.completed
// with the usage, once the response is recorded.
func (f responsesFormat) close(g *generation, ev simengine.Event) error {
	text := g.text.String()
	part := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	if err := f.event(g, "response.output_text.done", map[string]any{"item_id": g.itemID, "output_index": 0, "content_index": 0, "text": text}); err != nil {
		return err
	}
	if err := f.event(g, "response.content_part.done", map[string]any{"item_id": g.itemID, "output_index": 0, "content_index": 0, "part": part}); err != nil {
		return err
	}
	item := map[string]any{"type": "message", "id": g.itemID, "status": "completed", "role": "assistant", "content": []any{part}}
	if err := f.event(g, "response.output_item.done", map[string]any{"output_index": 0, "item": item}); err != nil {
		return err
	}
	g.recordResponse()
	typ := "response.completed"
	if ev.Reason == simengine.FinishLength {
		typ = "response.incomplete"
	}
	return f.event(g, typ, map[string]any{"response": f.response(g, "completed", &text, toResponsesUsage(ev.Usage), ev.Reason)})
}

func (f responsesFormat) whole(g *generation, text string, ev simengine.Event) any {
	return f.response(g, "completed", &text, toResponsesUsage(ev.Usage), ev.Reason)
}
