package caddymodule

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/hashicorp/golang-lru/v2/expirable"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Where a session, a response or a conversation lives. A session (a
// header a client sends, or OpenAI's prompt_cache_key) binds its requests
// to the replica that served it last, within the load bound
// (policies.PickSession). A response made through the router (its id
// read from the answer as it streams by) and a conversation bind a
// /v1/responses follow-up that names them (previous_response_id,
// conversation) to the replica that holds their state, which no other
// replica has: the follow-up goes there or, when that replica is gone,
// gets a clear error instead of a 404 from a replica that never saw it.
//
// The tables are package-level (they survive reloads, like replica
// state), bounded and expire: a session idle for sessionTTL is forgotten
// (its next request is placed anew), a response after responseTTL. Both
// are keyed by a 64-bit hash of the whole id, never by the id itself, so
// an entry costs the same whatever the id's length (a client may send a
// megabyte-long conversation id) and two ids that differ anywhere, even
// past their first kilobyte, are two entries; the value is the replica's
// address, shared with its state. So each table holds at most its count
// of fixed-size entries, whatever the clients send.

const (
	maxSessions  = 100_000
	sessionTTL   = time.Hour
	maxResponses = 100_000
	responseTTL  = 24 * time.Hour
	// maxSessionID bounds the session identity {llm.session} shows; the
	// session is keyed by a hash of the whole identity.
	maxSessionID = 256
)

var (
	// sessionHomes maps a session key to the replica that served it last.
	sessionHomes = expirable.NewLRU[uint64, string](maxSessions, nil, sessionTTL)
	// stateHomes maps a response id or a conversation id (stateKey) to
	// the replica that holds it.
	stateHomes = expirable.NewLRU[uint64, string](maxResponses, nil, responseTTL)
)

// defaultSessionHeaders are the headers a session identity is read from,
// in order, before the body's prompt_cache_key.
var defaultSessionHeaders = []string{"X-Session-Id", "X-Session-Affinity", "X-Claude-Code-Session-Id", "Session-Id"}

// describe reads what routes the request besides its prefix: its session
// and the response state it continues, and provides the placeholders
// {llm.model}, {llm.endpoint}, {llm.stream} and {llm.session}
// (placeholders.go).
func (h *LLMRoute) describe(r *http.Request, rc *routeCtx) {
	session := h.sessionOf(r, rc.req)
	rc.session = clip(session, maxSessionID)
	rc.ph.endpoint = endpointName(r.URL.Path)
	if rc.req != nil {
		rc.sessionKey = sessionKey(rc.req.Model, session)
		if h.shared != nil && rc.sessionKey != 0 {
			h.shared.sessionHome(rc.sessionKey) // sharedsessions.go
		}
		rc.pin, rc.pinKey = stateHome(rc.req)
		rc.shared = h.shared
		if rc.pin == "" && h.shared != nil {
			rc.pin, rc.pinKey = h.shared.pinOf(rc.req) // sharedpins.go
		}
	}
	providePlaceholders(r, rc)
}

// remember records, after a success on the replica at addr, where the
// response state the request made now lives. (A session is bound where
// its latest request was sent, at selection: binding it where a request
// ended would send it back to a replica it already left whenever an
// older, longer request finishes last.)
func remember(rc *routeCtx, addr string, ids *responseIDScanner) {
	if ids != nil {
		recordState(addr, ids.id, rc.req)
	}
}

// sessionOf returns the request's session identity, whole: the first
// non-empty session header, else the body's prompt_cache_key ("" for
// none).
func (h *LLMRoute) sessionOf(r *http.Request, req *policies.Request) string {
	hdrs := h.sessionHdrs
	if hdrs == nil {
		hdrs = h.SessionHeaders // not provisioned
	}
	if hdrs == nil {
		hdrs = defaultSessionHeaders
	}
	for _, name := range hdrs {
		if v := strings.TrimSpace(r.Header.Get(name)); v != "" {
			return v
		}
	}
	if req != nil {
		return req.PromptCacheKey
	}
	return ""
}

// canonicalHeaders returns names in their canonical spelling (nil for
// none), so that reading them per request allocates nothing.
func canonicalHeaders(names []string) []string {
	if names == nil {
		return nil
	}
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = http.CanonicalHeaderKey(n)
	}
	return out
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// sessionKey is the session's key in the table and for rendezvous: every
// router instance computes the same. Sessions are per model, so that one
// session naming two models binds once in each pool.
func sessionKey(model, session string) uint64 {
	if session == "" {
		return 0
	}
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(model)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(session)
	return d.Sum64() | 1
}

// stateHome returns the replica that holds the state a /v1/responses
// request continues, and the state's key (0 when it names none the
// router knows).
func stateHome(req *policies.Request) (addr string, key uint64) {
	if req == nil {
		return "", 0
	}
	for _, k := range [2]uint64{stateKey(stateResponse, req.PreviousResponseID), stateKey(stateConversation, req.Conversation)} {
		if k == 0 {
			continue
		}
		if a, ok := stateHomes.Get(k); ok {
			return a, k
		}
	}
	return "", 0
}

// Kinds of state a follow-up names, hashed into its key so that a
// response and a conversation of the same id are two entries.
const (
	stateResponse     byte = 'r'
	stateConversation byte = 'c'
)

// stateKey is the key of state id of kind in stateHomes: a hash of the
// whole id (0 for none).
func stateKey(kind byte, id string) uint64 {
	if id == "" {
		return 0
	}
	var d xxhash.Digest
	d.Reset()
	_, _ = d.Write([]byte{kind, 0})
	_, _ = d.WriteString(id)
	return d.Sum64() | 1
}

// recordState notes that the replica at addr made response id and holds
// the request's conversation.
func recordState(addr, responseID string, req *policies.Request) {
	if k := stateKey(stateResponse, responseID); k != 0 {
		stateHomes.Add(k, addr)
	}
	if req != nil {
		if k := stateKey(stateConversation, req.Conversation); k != 0 {
			stateHomes.Add(k, addr)
		}
	}
}

// withoutPrevious returns body without its previous_response_id, for a
// follow-up whose input carries the whole conversation but whose response
// state is gone with its replica.
func withoutPrevious(body []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return nil, false
	}
	delete(m, "previous_response_id")
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if enc.Encode(m) != nil {
		return nil, false
	}
	return bytes.TrimRight(out.Bytes(), "\n"), true
}

// responseIDScanner reads the id of a /v1/responses answer as it streams
// by: the first "id":"resp_..." of the JSON body or of the first event
// (response.created), within the answer's first maxResponseIDScan bytes.
type responseIDScanner struct {
	buf  []byte
	id   string
	done bool
}

const maxResponseIDScan = 16 << 10

var respIDField = []byte(`"id":"resp_`)

// observe looks at one write of the answer.
func (s *responseIDScanner) observe(p []byte) {
	if s.done {
		return
	}
	if room := maxResponseIDScan + len(respIDField) - len(s.buf); len(p) > room {
		p = p[:max(room, 0)] // what lies past the scan's bound is never read
	}
	s.buf = append(s.buf, p...)
	if i := bytes.Index(s.buf, respIDField); i >= 0 {
		rest := s.buf[i+len(`"id":"`):]
		if j := bytes.IndexByte(rest, '"'); j >= 0 {
			s.id = string(rest[:j])
			s.done, s.buf = true, nil
			return
		}
	}
	if len(s.buf) > maxResponseIDScan {
		s.done, s.buf = true, nil
	}
}

// Metrics of sessions and state.
var (
	metricSessionRoutes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "session_routes_total",
		Help: "Requests of a named session, by where they went: home (the replica that served the session last), new (a new session's rendezvous home) or moved (home full, cooling, gone or past the load bound).",
	}, []string{"result"})
	metricStateRoutes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: metricNS, Name: "state_routes_total",
		Help: "Responses API follow-ups naming a response or conversation the router recorded: pinned (sent to the replica holding it), gone (that replica left: refused), resent (gone, sent elsewhere without previous_response_id because the input carries the whole conversation).",
	}, []string{"result"})
)
