package simreplica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// errClosing: the server is closing.
var errClosing = errors.New("simreplica: server closing")

// sleep waits d, or less if the client goes away or the server closes;
// it returns nil when the whole d elapsed.
func (s *Server) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return errClosing
	}
}

// handleGenerate serves POST /v1/chat/completions, /v1/completions,
// /v1/messages and /v1/responses: faults first, then parsing, then the
// engine. Errors come in the shape of the request's API.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, kind apiKind) {
	body, f, ok := s.prelude(w, r, kind)
	if !ok {
		return
	}
	parse, promptParam := parseChat, "messages"
	switch kind {
	case apiCompletions:
		parse, promptParam = parseCompletions, "prompt"
	case apiMessages:
		parse = parseMessages
	case apiResponses:
		parse, promptParam = parseResponses, "input"
	}
	g, err := parse(body)
	if err != nil {
		s.counts.inc(cntRejected)
		kind.writeBadRequest(w, err)
		return
	}
	if kind == apiResponses {
		hist, ok := s.responses.history(g)
		if !ok {
			s.counts.inc(cntRejected)
			writeNoPrevious(w, g.previousID)
			return
		}
		if hist != nil {
			g.promptTokens = append(append([]uint32(nil), hist...), simengine.Tokenize(g.prompt)...)
		}
	}
	req, err := s.engineRequest(r, g, kind, promptParam)
	if err != nil {
		s.counts.inc(cntRejected)
		kind.writeBadRequest(w, err)
		return
	}

	if f.Restart {
		n := s.drv.resetPrefixCache()
		s.cfg.Logf("simreplica %s: restart fault, %d cached blocks wiped", s.cfg.Name, n)
	}
	if f.Stall > 0 {
		if err := s.sleep(r.Context(), f.Stall); err != nil {
			s.counts.inc(cntAborted)
			return
		}
	}

	sub, err := s.drv.submit(req)
	if err != nil {
		s.counts.inc(cntRejected)
		kind.writeBadRequest(w, err)
		return
	}
	gen := &generation{
		s: s, w: w, rc: http.NewResponseController(w), ctx: r.Context(),
		req: g, id: req.ID, sub: sub, fault: f, prompt: req.Prompt,
		created: time.Now().Unix(),
	}
	switch kind {
	case apiChat:
		gen.format, gen.respID = openaiFormat{}, fmt.Sprintf("chatcmpl-%016x", rand.Uint64())
	case apiCompletions:
		gen.format, gen.respID = openaiFormat{}, fmt.Sprintf("cmpl-%016x", rand.Uint64())
	case apiMessages:
		gen.format, gen.respID = anthropicFormat{}, fmt.Sprintf("msg_%016x%08x", rand.Uint64(), rand.Uint32())
	case apiResponses:
		n := s.nextResp.Add(1)
		gen.format = responsesFormat{}
		gen.respID = fmt.Sprintf("resp_%s%012x", s.idPrefix, n)
		gen.itemID = fmt.Sprintf("msg_%s%012x", s.idPrefix, n)
	}
	if g.stream {
		gen.stream()
	} else {
		gen.respond()
	}
}

// prelude runs what every inference request goes through before its body
// is parsed: the method, the request counters, the faults and the down
// time of a restart, then the bounded body read. It answers the request
// itself (in kind's error shape) and returns false when the request ends
// there.
func (s *Server) prelude(w http.ResponseWriter, r *http.Request, kind apiKind) ([]byte, Fault, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		kind.writeError(w, http.StatusMethodNotAllowed, errInvalidRequest,
			fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path), "", "method_not_allowed")
		return nil, NoFault, false
	}
	s.counts.receive(r.Header.Get("X-Request-Id"))
	f, err := requestFault(r, s.currentFault(), s.cfg.RetryAfter, s.cfg.Stall)
	if err != nil {
		s.counts.inc(cntRejected)
		kind.writeBadRequest(w, err)
		return nil, f, false
	}
	if s.isDown(time.Now()) {
		s.counts.inc(cntFaulted)
		w.Header().Set("Retry-After", strconv.Itoa(s.cfg.RetryAfter))
		kind.writeError(w, http.StatusServiceUnavailable, errUnavailable, "replica is restarting", "", "")
		return nil, f, false
	}
	if f.Refuse {
		s.counts.inc(cntCut)
		closeConn(w)
		return nil, f, false
	}
	if f.Status != 0 {
		s.counts.inc(cntFaulted)
		kind.writeFaultStatus(w, f.Status, f.RetryAfter)
		return nil, f, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		s.counts.inc(cntRejected)
		kind.writeBadRequest(w, bad("", "reading request body: %v", err))
		return nil, f, false
	}
	return body, f, true
}

// engineRequest turns a parsed body into an engine request: the prompt
// tokens, max_tokens (default: the rest of the context for chat, 16 for
// completions, as in vLLM) and the natural answer length.
func (s *Server) engineRequest(r *http.Request, g *genRequest, kind apiKind, promptParam string) (simengine.Request, error) {
	prompt := g.tokens()
	if len(prompt) == 0 {
		return simengine.Request{}, bad(promptParam, "the prompt must not be empty")
	}
	maxLen := s.cfg.Engine.MaxModelLen
	maxTokens := g.maxTokens
	if maxTokens == 0 {
		if kind == apiCompletions {
			maxTokens = DefaultCompletionsMaxTokens
		} else {
			maxTokens = max(maxLen-len(prompt), 1)
		}
	}
	if len(prompt)+maxTokens > maxLen {
		return simengine.Request{}, bad(promptParam, "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the %s, %d in the completion). Please reduce the length of the %s or completion.",
			maxLen, len(prompt)+maxTokens, len(prompt), promptParam, maxTokens, promptParam)
	}
	output := s.cfg.OutputTokens
	if v := r.Header.Get(HeaderOutputTokens); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return simengine.Request{}, bad("", "bad %s %q", HeaderOutputTokens, v)
		}
		output = n
	}
	return simengine.Request{ID: s.nextID.Add(1), Prompt: prompt, MaxTokens: maxTokens, OutputTokens: output}, nil
}

// generation is one request being answered.
type generation struct {
	s       *Server
	w       http.ResponseWriter
	rc      *http.ResponseController
	ctx     context.Context
	req     *genRequest
	id      uint64
	sub     *subscription
	fault   Fault
	format  answerFormat
	respID  string
	created int64
	prompt  []uint32 // the prompt's tokens

	// For the Responses API: the output item's id, the next event's
	// sequence number, and the answer so far (text and tokens).
	itemID string
	seq    int
	text   strings.Builder
	out    []uint32
}

// answerFormat writes one API's answers: the events of a stream around its
// tokens, or the whole JSON answer.
type answerFormat interface {
	// open writes what precedes the first token; cached is the prompt
	// tokens the cache served.
	open(g *generation, cached int) error
	// token writes one token's text; fin is the finished event when the
	// token is the last one, else nil.
	token(g *generation, text string, fin *simengine.Event) error
	// close writes what follows the last token.
	close(g *generation, ev simengine.Event) error
	// whole is the JSON answer of a request that is not streamed.
	whole(g *generation, text string, ev simengine.Event) any
}

// next waits for events. It returns them with aborted set when a restart
// or shutdown ended the request, or err when the client went away.
func (g *generation) next() (evs []simengine.Event, aborted bool, err error) {
	for {
		evs, aborted = g.sub.take()
		if len(evs) > 0 || aborted {
			return evs, aborted, nil
		}
		select {
		case <-g.sub.notify:
		case <-g.ctx.Done():
			return nil, false, g.ctx.Err()
		}
	}
}

// gone handles a client that went away: the engine drops the sequence.
func (g *generation) gone() {
	g.s.drv.cancel(g.id)
	g.s.counts.inc(cntAborted)
}

// cut closes the connection abruptly, without a terminating chunk (chunks
// already written were flushed by writeEvent; nothing else is sent).
func (g *generation) cut() {
	g.s.drv.cancel(g.id)
	g.s.counts.inc(cntCut)
	panic(http.ErrAbortHandler)
}

// abortedByServer ends a request that a restart or Close aborted: a 503
// if nothing was sent yet, else an abrupt close.
func (g *generation) abortedByServer(started bool) {
	g.s.counts.inc(cntAborted)
	if started {
		panic(http.ErrAbortHandler)
	}
	g.w.Header().Set("Retry-After", strconv.Itoa(g.s.cfg.RetryAfter))
	g.req.kind.writeError(g.w, http.StatusServiceUnavailable, errUnavailable, "replica restarted; request aborted", "", "")
}

// recordResponse remembers a finished /v1/responses answer on this
// replica, for follow-ups that name it.
func (g *generation) recordResponse() {
	g.s.responses.record(g.req, g.respID, g.prompt, g.out)
}

// tokenText is the text of a generated token.
func tokenText(id uint32) string {
	s, _ := simengine.TokenText(id)
	return s
}

// writeEvent writes one SSE event and flushes it.
func (g *generation) writeEvent(payload []byte) error {
	buf := make([]byte, 0, len(payload)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, payload...)
	buf = append(buf, "\n\n"...)
	if _, err := g.w.Write(buf); err != nil {
		return err
	}
	return g.rc.Flush()
}

func (g *generation) writeChunk(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return g.writeEvent(b)
}

// writeNamed writes one SSE event with an event name (Anthropic's and the
// Responses API's streams) and flushes it.
func (g *generation) writeNamed(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	buf := make([]byte, 0, len(b)+len(event)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, event...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	if _, err := g.w.Write(buf); err != nil {
		return err
	}
	return g.rc.Flush()
}

// openaiFormat writes chat and completions answers.
type openaiFormat struct{}

// chunk builds a streaming chunk; for chat, delta is the choice's delta.
func (g *generation) chunk(text string, delta *chatMessage, finish *string) apiResponse {
	if g.req.kind == apiChat {
		if delta == nil {
			delta = &chatMessage{Content: &text}
		}
		return apiResponse{ID: g.respID, Object: "chat.completion.chunk", Created: g.created, Model: g.req.model,
			Choices: []chatChoice{{Index: 0, Delta: delta, FinishReason: finish}}}
	}
	return apiResponse{ID: g.respID, Object: "text_completion", Created: g.created, Model: g.req.model,
		Choices: []textChoice{{Index: 0, Text: text, FinishReason: finish}}}
}

// open writes chat's role chunk.
func (openaiFormat) open(g *generation, _ int) error {
	if g.req.kind != apiChat {
		return nil
	}
	empty := ""
	return g.writeChunk(g.chunk("", &chatMessage{Role: "assistant", Content: &empty}, nil))
}

// token writes one chunk, the last one with its finish_reason.
func (openaiFormat) token(g *generation, text string, fin *simengine.Event) error {
	var finish *string
	if fin != nil {
		finish = strPtr(fin.Reason.String())
	}
	return g.writeChunk(g.chunk(text, nil, finish))
}

// close writes the usage chunk when asked for, and [DONE].
func (openaiFormat) close(g *generation, ev simengine.Event) error {
	if g.req.includeUsage {
		u := g.chunk("", nil, nil)
		if g.req.kind == apiChat {
			u.Choices = []chatChoice{}
		} else {
			u.Choices = []textChoice{}
		}
		u.Usage = g.s.cfg.Personality.apiUsage(ev.Usage)
		if err := g.writeChunk(u); err != nil {
			return err
		}
	}
	return g.writeEvent([]byte("[DONE]"))
}

func (openaiFormat) whole(g *generation, text string, ev simengine.Event) any {
	reason := strPtr(ev.Reason.String())
	resp := apiResponse{ID: g.respID, Created: g.created, Model: g.req.model, Usage: g.s.cfg.Personality.apiUsage(ev.Usage)}
	if g.req.kind == apiChat {
		resp.Object = "chat.completion"
		resp.Choices = []chatChoice{{Index: 0, Message: &chatMessage{Role: "assistant", Content: &text}, FinishReason: reason}}
	} else {
		resp.Object = "text_completion"
		resp.Choices = []textChoice{{Index: 0, Text: text, FinishReason: reason}}
	}
	return resp
}

// stream answers with server-sent events in the request's format: what
// opens the stream, one event per token, what closes it. Headers go out
// with the first token.
func (g *generation) stream() {
	started, chunks := false, 0
	for {
		evs, aborted, err := g.next()
		if err != nil {
			g.gone()
			return
		}
		for i, ev := range evs {
			switch ev.Kind {
			case simengine.EventFirstToken, simengine.EventToken:
				if g.fault.CutAfter >= 0 && chunks >= g.fault.CutAfter {
					g.cut()
				}
				if !started {
					started = true
					h := g.w.Header()
					h.Set("Content-Type", "text/event-stream")
					h.Set("Cache-Control", "no-cache")
					h.Set("X-Accel-Buffering", "no")
					g.w.WriteHeader(http.StatusOK)
					if err := g.format.open(g, ev.CachedTokens); err != nil {
						g.gone()
						return
					}
				}
				var fin *simengine.Event
				if i+1 < len(evs) && evs[i+1].Kind == simengine.EventFinished {
					fin = &evs[i+1]
				}
				if g.req.kind == apiResponses {
					g.out = append(g.out, ev.Token)
				}
				if err := g.format.token(g, tokenText(ev.Token), fin); err != nil {
					g.gone()
					return
				}
				chunks++
				if g.fault.CutAfter >= 0 && chunks >= g.fault.CutAfter {
					g.cut()
				}
				if g.fault.Slow > 0 && fin == nil {
					if err := g.s.sleep(g.ctx, g.fault.Slow); err != nil {
						if errors.Is(err, errClosing) {
							g.abortedByServer(true)
						} else {
							g.gone()
						}
						return
					}
				}
			case simengine.EventFinished:
				if err := g.format.close(g, ev); err != nil {
					g.gone()
					return
				}
				g.s.counts.inc(cntCompleted)
				return
			}
		}
		if aborted {
			g.abortedByServer(started)
			return
		}
	}
}

// respond answers with one JSON object once the request finished.
func (g *generation) respond() {
	var text strings.Builder
	for {
		evs, aborted, err := g.next()
		if err != nil {
			g.gone()
			return
		}
		for _, ev := range evs {
			switch ev.Kind {
			case simengine.EventFirstToken, simengine.EventToken:
				text.WriteString(tokenText(ev.Token))
				if g.req.kind == apiResponses {
					g.out = append(g.out, ev.Token)
				}
			case simengine.EventFinished:
				g.finish(text.String(), ev)
				return
			}
		}
		if aborted {
			g.abortedByServer(false)
			return
		}
	}
}

// finish writes the non-streaming response for a finished request,
// applying the slow and cut-after faults.
func (g *generation) finish(text string, ev simengine.Event) {
	if g.fault.Slow > 0 && ev.Usage.CompletionTokens > 1 {
		if err := g.s.sleep(g.ctx, g.fault.Slow*time.Duration(ev.Usage.CompletionTokens-1)); err != nil {
			g.s.counts.inc(cntAborted)
			return
		}
	}
	resp := g.format.whole(g, text, ev)
	if g.fault.CutAfter >= 0 {
		// Promise the whole body, send part of it, and close.
		g.s.counts.inc(cntCut)
		if g.fault.CutAfter > 0 {
			b, _ := json.Marshal(resp)
			g.w.Header().Set("Content-Type", "application/json")
			g.w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			g.w.WriteHeader(http.StatusOK)
			_, _ = g.w.Write(b[:len(b)/2])
			_ = g.rc.Flush()
		}
		panic(http.ErrAbortHandler)
	}
	if g.req.kind == apiResponses {
		g.recordResponse()
	}
	writeJSON(g.w, http.StatusOK, resp)
	g.s.counts.inc(cntCompleted)
}
