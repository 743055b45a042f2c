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

// handleGenerate serves POST /v1/chat/completions and /v1/completions:
// faults first, then parsing, then the engine.
func (s *Server) handleGenerate(w http.ResponseWriter, r *http.Request, kind apiKind) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	s.counts.receive(r.Header.Get("X-Request-Id"))
	f, err := requestFault(r, s.currentFault(), s.cfg.RetryAfter, s.cfg.Stall)
	if err != nil {
		s.counts.inc(cntRejected)
		writeBadRequest(w, err)
		return
	}
	if s.isDown(time.Now()) {
		s.counts.inc(cntFaulted)
		w.Header().Set("Retry-After", strconv.Itoa(s.cfg.RetryAfter))
		writeError(w, http.StatusServiceUnavailable, errUnavailable, "replica is restarting", "", "")
		return
	}
	if f.Refuse {
		s.counts.inc(cntCut)
		closeConn(w)
		return
	}
	if f.Status != 0 {
		s.counts.inc(cntFaulted)
		writeFaultStatus(w, f.Status, f.RetryAfter)
		return
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		s.counts.inc(cntRejected)
		writeBadRequest(w, bad("", "reading request body: %v", err))
		return
	}
	parse, promptParam := parseChat, "messages"
	if kind == apiCompletions {
		parse, promptParam = parseCompletions, "prompt"
	}
	g, err := parse(body)
	if err != nil {
		s.counts.inc(cntRejected)
		writeBadRequest(w, err)
		return
	}
	req, err := s.engineRequest(r, g, kind, promptParam)
	if err != nil {
		s.counts.inc(cntRejected)
		writeBadRequest(w, err)
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
		writeBadRequest(w, err)
		return
	}
	gen := &generation{
		s: s, w: w, rc: http.NewResponseController(w), ctx: r.Context(),
		req: g, id: req.ID, sub: sub, fault: f,
		created: time.Now().Unix(),
	}
	if kind == apiChat {
		gen.respID = fmt.Sprintf("chatcmpl-%016x", rand.Uint64())
	} else {
		gen.respID = fmt.Sprintf("cmpl-%016x", rand.Uint64())
	}
	if g.stream {
		gen.stream()
	} else {
		gen.respond()
	}
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
	respID  string
	created int64
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
	writeError(g.w, http.StatusServiceUnavailable, errUnavailable, "replica restarted; request aborted", "", "")
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

// stream answers with server-sent events: for chat a role chunk, then one
// chunk per token (the last one with finish_reason), an optional usage
// chunk, and [DONE]. Headers go out with the first token.
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
					if g.req.kind == apiChat {
						empty := ""
						role := g.chunk("", &chatMessage{Role: "assistant", Content: &empty}, nil)
						if err := g.writeChunk(role); err != nil {
							g.gone()
							return
						}
					}
				}
				var finish *string
				if i+1 < len(evs) && evs[i+1].Kind == simengine.EventFinished {
					finish = strPtr(evs[i+1].Reason.String())
				}
				if err := g.writeChunk(g.chunk(tokenText(ev.Token), nil, finish)); err != nil {
					g.gone()
					return
				}
				chunks++
				if g.fault.CutAfter >= 0 && chunks >= g.fault.CutAfter {
					g.cut()
				}
				if g.fault.Slow > 0 && finish == nil {
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
				if g.req.includeUsage {
					u := g.chunk("", nil, nil)
					if g.req.kind == apiChat {
						u.Choices = []chatChoice{}
					} else {
						u.Choices = []textChoice{}
					}
					u.Usage = toAPIUsage(ev.Usage)
					if err := g.writeChunk(u); err != nil {
						g.gone()
						return
					}
				}
				if err := g.writeEvent([]byte("[DONE]")); err != nil {
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
	reason := strPtr(ev.Reason.String())
	resp := apiResponse{ID: g.respID, Created: g.created, Model: g.req.model, Usage: toAPIUsage(ev.Usage)}
	if g.req.kind == apiChat {
		resp.Object = "chat.completion"
		resp.Choices = []chatChoice{{Index: 0, Message: &chatMessage{Role: "assistant", Content: &text}, FinishReason: reason}}
	} else {
		resp.Object = "text_completion"
		resp.Choices = []textChoice{{Index: 0, Text: text, FinishReason: reason}}
	}
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
	writeJSON(g.w, http.StatusOK, resp)
	g.s.counts.inc(cntCompleted)
}
