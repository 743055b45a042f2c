package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/llmroute/caddy-llmroute/policies"
)

func init() {
	caddy.RegisterModule(LLMRoute{})
}

// LLMRoute is the llm_route handler. Placed before reverse_proxy (with
// `lb_policy llm`), it authenticates the client, reads the bounded body once,
// computes the request's prefix keys and hands them to the selection policy,
// then watches the response so that the reservation the policy takes is
// released exactly once, however the response ends, and the replica's
// outcome (success, failure, broken stream) feeds its cooldown.
type LLMRoute struct {
	// APIKeys are the keys clients must present as `Authorization: Bearer
	// <key>`. Each may be a placeholder such as {env.LLM_KEY} or
	// {file./run/secrets/key}, resolved when the config loads. Empty means
	// no authentication. Keys are compared in constant time and never logged.
	APIKeys []string `json:"api_keys,omitempty"`

	// UpstreamAPIKey, when set, is sent to the replicas as `Authorization:
	// Bearer <key>`. The client's own key is never forwarded. Placeholders
	// are resolved as for APIKeys.
	UpstreamAPIKey string `json:"upstream_api_key,omitempty"`

	// Deployment identifies the model deployment (for example the model
	// build and engine version). It seeds every prefix key, so replicas of
	// different deployments never share a believed cache.
	Deployment string `json:"deployment,omitempty"`

	// MaxBodyBytes bounds the request body. A larger body gets 413.
	// Default 8 MiB.
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`

	// BlockSize is the number of bytes of canonical prompt text in each of
	// the prefix chain's first 256 blocks; past them the blocks double in
	// size every 64, so that a long prompt is keyed to its end with few
	// keys. Default 128.
	BlockSize int `json:"block_size,omitempty"`

	// MaxBlocks caps the prefix chain. Default 640: 1,040 KiB of prompt
	// at the default block size, 128K tokens at up to 8 bytes a token.
	MaxBlocks int `json:"max_blocks,omitempty"`

	// ReplicaHeader, when set, names a response header that tells the
	// client which replica served it (its dial address). Off by default.
	ReplicaHeader string `json:"replica_header,omitempty"`

	// AllowPaths lists further request paths that may reach the replicas,
	// with any method, besides the inference API (POST to the chat,
	// completions, responses, messages, embeddings, rerank/score and
	// tokenize endpoints; GET /v1/models). A trailing `*` matches any path
	// below, e.g. `/v1/audio/*`. Anything else gets an OpenAI-shaped 404
	// (405 for a known path with another method): a replica's own
	// /metrics, /sleep or /reset_prefix_cache are not for key holders.
	AllowPaths []string `json:"allow_paths,omitempty"`

	// SessionHeaders are the request headers a session identity is read
	// from, in order, before the body's prompt_cache_key. Requests of one
	// session stay on the replica that served the session last while it
	// is within the load bound (prefix_affinity and prefix_load). Default
	// X-Session-Id, X-Session-Affinity, X-Claude-Code-Session-Id,
	// Session-Id.
	SessionHeaders []string `json:"session_headers,omitempty"`

	// RequestUsage asks the engine for usage in streamed answers
	// (stream_options.include_usage) so that llmroute can compare the
	// cached tokens it predicted with those the engine reports. When the
	// client did not ask for usage, the extra chunk is not passed on.
	RequestUsage bool `json:"request_usage,omitempty"`

	// Tenants are the named clients, by name (up to 64 letters, digits,
	// '.', '_' or '-'), each with its own keys, weight, priority ceiling,
	// cap and budgets (see Tenant). The keys of APIKeys belong to the
	// tenant named "default", which may be given settings here too. With
	// no key at all, every request is the default tenant's.
	Tenants map[string]*Tenant `json:"tenants,omitempty"`
	// SharedStore, when set, is the Valkey or Redis store through which
	// several instances of the gateway behave as one: response and
	// conversation pins, session homes, the tenants' per-minute budgets
	// and their max_in_flight are shared (docs/scaling.md). Without it each instance keeps its own.
	SharedStore *SharedStoreConfig `json:"shared_store,omitempty"`

	keyHashes [][32]byte
	// keyTenant names each key's tenant (an index into tenants, whose
	// first is the default), tenants this handler's tenant states.
	keyTenant []int
	tenants   []*tenantState
	upstream  string
	parseCfg  policies.ParseConfig
	// sessionHdrs is SessionHeaders spelled canonically (Provision).
	sessionHdrs []string
	logger      *zap.Logger
	// cleaned is set by the first Cleanup (tenants.go); Caddy calls
	// Cleanup once, from one goroutine.
	cleaned bool
	// shared is the shared_store (sharedstore.go), sharedKey its name in
	// sharedStores; nil without one.
	shared    *sharedStore
	sharedKey string
}

// cleanupOnce reports whether this is the handler's first Cleanup, which
// alone drops its references.
func (h *LLMRoute) cleanupOnce() bool {
	first := !h.cleaned
	h.cleaned = true
	return first
}

// defaultMaxBodyBytes bounds a request body unless max_body_bytes says
// otherwise (and bounds the llm_model matcher's own read).
const defaultMaxBodyBytes = 8 << 20

// CaddyModule returns the Caddy module information.
func (LLMRoute) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.llm_route",
		New: func() caddy.Module { return new(LLMRoute) },
	}
}

// Provision resolves placeholders in the keys and sets defaults.
func (h *LLMRoute) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if err := h.resolveKeys(caddy.NewReplacer()); err != nil {
		return err
	}
	if err := h.provisionShared(caddy.NewReplacer()); err != nil {
		return err
	}
	if err := h.provisionTenants(caddy.NewReplacer(), tenantClock); err != nil {
		return err
	}
	if h.MaxBodyBytes == 0 {
		h.MaxBodyBytes = defaultMaxBodyBytes
	}
	h.parseCfg = policies.ParseConfig{Deployment: h.Deployment, BlockSize: h.BlockSize, MaxBlocks: h.MaxBlocks}
	h.sessionHdrs = canonicalHeaders(h.SessionHeaders)
	registerMetrics(ctx)
	return nil
}

// Validate checks the configuration.
func (h *LLMRoute) Validate() error {
	if h.MaxBodyBytes < 0 {
		return fmt.Errorf("max_body_bytes must be >= 0")
	}
	if h.BlockSize < 0 || h.MaxBlocks < 0 {
		return fmt.Errorf("block_size and max_blocks must be >= 0")
	}
	for _, p := range h.AllowPaths {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("allow_paths: %q must start with /", p)
		}
	}
	return h.validateTenants()
}

// ServeHTTP authenticates, parses, routes and accounts for one request:
// the walk of docs/design.md, one step per file (auth.go, request.go,
// routectx.go, then the policy's selection.go and the answer's
// responsewriter.go, outcome.go, attempt.go and feedback.go).
func (h *LLMRoute) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	w = withErrorShape(r, w) // Anthropic's error shape on its paths (errors.go)
	// The key names the tenant (auth.go, tenants.go).
	tenant, ok := h.tenantOf(r)
	if !ok {
		countRequest("", "", "unauthorized")
		writeAPIError(w, errUnauthorized)
		return nil
	}
	stripCredentials(r)
	if apiErr, ok := h.allowed(r); !ok {
		countRequest("", "", "not_allowed")
		writeAPIError(w, apiErr)
		return nil
	}
	if h.upstream != "" {
		r.Header.Set("Authorization", "Bearer "+h.upstream)
	}

	start := time.Now()
	x := new(exchange)
	rc := &x.rc
	var sniff *usageSniffer
	if hasBody(r) {
		req, bb, body, apiErr, ok := h.readRequest(r)
		if !ok {
			countRequest("", "", "bad_request")
			writeAPIError(w, apiErr)
			return nil
		}
		sniff = &x.sniff
		sniff.bound = boundOf(body, req.OutputLimit)
		if h.RequestUsage && req.Stream && !req.HasStreamOptions && req.Endpoint != policies.EndpointResponses &&
			req.Endpoint != policies.EndpointMessages { // Anthropic streams always carry usage
			if b, ok := withIncludeUsage(bb, body); ok {
				body = b
				sniff.strip = true
			}
		}
		rc.init(start, req, body)
		r.Body = rc.holdBody(bb)
		r.ContentLength = int64(len(body))
		r.TransferEncoding = nil
		setContentLength(r.Header, int64(len(body)))
		r.Header.Del("Content-Encoding")
	} else {
		rc.init(start, nil, nil)
		r.Header.Del("Content-Encoding") // nothing to decode, nothing to label
	}
	h.describe(r, rc)
	h.noteModel(rc) // modellabels.go
	if r.URL.Path == "/v1/models" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		h.serveModels(w, r)
		return nil
	}
	if apiErr, ok := h.admitTenant(r, rc, tenant); !ok { // budgets.go
		writeAPIError(w, apiErr)
		h.observeRefused(r, rc, apiErr.status) // operator.go
		return nil
	}
	caddyhttp.SetVar(r.Context(), routeVarKey, rc)
	// Tell a dial timeout from other transport errors (previousAttempt).
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), rc.dialTrace()))

	ww := x.writer(w, h.ReplicaHeader, sniff)
	if rc.req != nil && rc.req.Endpoint == policies.EndpointResponses {
		ww.respIDs = &responseIDScanner{}
	}

	returned := false
	defer func() {
		// Runs on return, on Caddy's abort panic (a replica died
		// mid-stream) and after a client disconnect: release once.
		h.finish(r, ww, rc, returned)
	}()
	if apiErr, ok := h.leaseTenant(r, rc); !ok { // sharedleases.go
		returned = true
		writeAPIError(ww, apiErr)
		return nil
	}
	err := next.ServeHTTP(ww, r)
	returned = true
	if err == nil && ww.answerCut() && r.Context().Err() == nil {
		// The replica ended the answer short of its protocol's end, where
		// HTTP framing could not tell: the client must not see a clean
		// end. Abort as reverse_proxy does mid-stream (no final chunk,
		// or a reset HTTP/2 stream); the deferred finish settles it.
		ww.cut = true
		panic(http.ErrAbortHandler)
	}
	if err == nil && !ww.wroteHeader && !rc.attempted() {
		// No handler after llm_route answered (no pool's matcher took the
		// request): say so, rather than Caddy's empty 200.
		writeAPIError(ww, notServed(rc))
		return nil
	}
	if err == nil || ww.wroteHeader {
		return err
	}
	// Nothing reached the client yet: answer in OpenAI's error shape.
	if reject, ra := rc.rejection(); reject != rejectNone {
		writeAPIError(ww, rejectError(reject, ra))
		return nil
	}
	var herr caddyhttp.HandlerError
	if errors.As(err, &herr) && herr.StatusCode == 499 {
		return err // the client left; nobody reads an answer
	}
	status := http.StatusBadGateway
	if errors.As(err, &herr) && herr.StatusCode >= 400 {
		status = herr.StatusCode
	}
	if c := h.logger.Check(zap.DebugLevel, "upstream error"); c != nil {
		c.Write(zap.Int("status", status), zap.Error(err))
	}
	writeAPIError(ww, upstreamError(status, upstreamRetryAfter(r)))
	return nil
}

// exchange holds what one request needs from arrival to release, in one
// allocation: its routing context, the writer that watches its answer and
// the answer's usage sniffer.
type exchange struct {
	rc    routeCtx
	ww    routeWriter
	sniff usageSniffer
}

// writer returns the exchange's routeWriter over w (sniff nil: no usage
// to read).
func (x *exchange) writer(w http.ResponseWriter, replicaHdr string, sniff *usageSniffer) *routeWriter {
	x.ww = routeWriter{rc: &x.rc, replicaHdr: replicaHdr, sniff: sniff}
	x.ww.wrapper.ResponseWriter = w
	x.ww.ResponseWriterWrapper = &x.ww.wrapper
	return &x.ww
}

// finish settles the request: the replica's outcome (outcome.go), the
// feedback, the release of the attempt still held and the requests metric.
func (h *LLMRoute) finish(r *http.Request, ww *routeWriter, rc *routeCtx, returned bool) {
	a := rc.current()
	o, label := settle(r, ww, a, returned)
	strategy, addr := "", ""
	if a != nil {
		strategy, addr = a.rules.strategy, a.rep.addr
		if o.kind == outcomeSuccess && ww.sniff != nil {
			ww.sniff.finish()
			h.feedback(rc, a, ww.sniff)
		}
		if o.kind == outcomeSuccess {
			remember(rc, addr, ww.respIDs)
		}
	}
	if rc.held() {
		rc.endHold(holdSampleOf(rc, ww, a, o)) // slothold.go
	}
	rc.finish(o)
	h.settleTenant(rc, ww, a != nil) // budgets.go
	h.releaseLease(rc)               // sharedleases.go
	countRequest(strategy, addr, label)
	h.observe(r, ww, rc, label, strategy, addr) // operator.go
}

// Interface guards
var (
	_ caddy.Provisioner           = (*LLMRoute)(nil)
	_ caddy.Validator             = (*LLMRoute)(nil)
	_ caddyhttp.MiddlewareHandler = (*LLMRoute)(nil)
	_ caddyfile.Unmarshaler       = (*LLMRoute)(nil)
)
