package simreplica

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"
)

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, errServer, err.Error(), "", "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// handleModels answers GET /v1/models.
func (s *Server) handleModels(w http.ResponseWriter) {
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data": []map[string]any{{
			"id":            s.cfg.Model,
			"object":        "model",
			"created":       s.created,
			"owned_by":      "simreplica",
			"root":          s.cfg.Model,
			"max_model_len": s.cfg.Engine.MaxModelLen,
		}},
	})
}

// handleHealth answers GET /health: 200 "ok", or 503 during a restart.
func (s *Server) handleHealth(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.isDown(time.Now()) {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "restarting")
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// readAdminBody reads an optional small JSON body into v.
func readAdminBody(r *http.Request, v any) error {
	b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return bad("", "malformed JSON body: %v", err)
	}
	return nil
}

// handleRestart answers POST /sim/restart, body optional
// {"down_ms": N}: see Server.Restart.
func (s *Server) handleRestart(w http.ResponseWriter, r *http.Request) {
	var req struct {
		DownMs *int `json:"down_ms"`
	}
	if err := readAdminBody(r, &req); err != nil {
		writeBadRequest(w, err)
		return
	}
	down := s.cfg.RestartDown
	if req.DownMs != nil {
		down = time.Duration(*req.DownMs) * time.Millisecond
	}
	n := s.Restart(down)
	writeJSON(w, http.StatusOK, map[string]any{"restarted": true, "aborted": n, "down_ms": down.Milliseconds()})
}

// faultBody is the JSON of POST /sim/fault: the same values as the fault
// headers, plus a duration.
type faultBody struct {
	Fault      string `json:"fault"`
	RetryAfter *int   `json:"retry_after"`
	StallMs    *int   `json:"stall_ms"`
	DurationMs int    `json:"duration_ms"`
}

// handleFault answers GET /sim/fault (the current global fault) and
// POST /sim/fault (set it; {"fault":""} clears it).
func (s *Server) handleFault(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var req faultBody
		if err := readAdminBody(r, &req); err != nil {
			writeBadRequest(w, err)
			return
		}
		retry, stall := s.cfg.RetryAfter, s.cfg.Stall
		if req.RetryAfter != nil {
			retry = *req.RetryAfter
		}
		if req.StallMs != nil {
			stall = time.Duration(*req.StallMs) * time.Millisecond
		}
		f, err := ParseFault(req.Fault, retry, stall)
		if err != nil {
			writeBadRequest(w, err)
			return
		}
		s.setFault(f, time.Duration(req.DurationMs)*time.Millisecond)
	}
	f := s.currentFault()
	writeJSON(w, http.StatusOK, map[string]any{"fault": f.String(), "retry_after": f.RetryAfter})
}

// handleCached answers POST /sim/cached with a chat or completions body:
// how many of its prompt tokens the cache holds now, without changing it
// (an oracle's view for experiments).
func (s *Server) handleCached(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	var probe struct {
		Messages json.RawMessage `json:"messages"`
	}
	_ = json.Unmarshal(body, &probe)
	parse := parseCompletions
	if len(probe.Messages) > 0 {
		parse = parseChat
	}
	g, err := parse(body)
	if err != nil {
		writeBadRequest(w, err)
		return
	}
	toks := g.tokens()
	writeJSON(w, http.StatusOK, map[string]int{
		"prompt_tokens": len(toks),
		"cached_tokens": s.CachedPrefixTokens(toks),
	})
}
