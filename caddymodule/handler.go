package caddymodule

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"strconv"
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

	// BlockSize is the number of bytes of canonical prompt text per prefix
	// block. Default 128.
	BlockSize int `json:"block_size,omitempty"`

	// MaxBlocks caps the prefix chain. Default 256 (32 KiB of prompt).
	MaxBlocks int `json:"max_blocks,omitempty"`

	// ReplicaHeader, when set, names a response header that tells the
	// client which replica served it (its dial address). Off by default.
	ReplicaHeader string `json:"replica_header,omitempty"`

	// RequestUsage asks the engine for usage in streamed answers
	// (stream_options.include_usage) so that llmroute can compare the
	// cached tokens it predicted with those the engine reports. When the
	// client did not ask for usage, the extra chunk is not passed on.
	RequestUsage bool `json:"request_usage,omitempty"`

	keyHashes [][32]byte
	upstream  string
	parseCfg  policies.ParseConfig
	logger    *zap.Logger
}

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
	repl := caddy.NewReplacer()
	h.keyHashes = h.keyHashes[:0]
	for i, k := range h.APIKeys {
		v, err := repl.ReplaceOrErr(k, true, true)
		if err != nil {
			return fmt.Errorf("api_keys[%d]: %v", i, err)
		}
		v = strings.TrimSpace(v)
		if v == "" {
			return fmt.Errorf("api_keys[%d] is empty after placeholders were resolved", i)
		}
		h.keyHashes = append(h.keyHashes, sha256.Sum256([]byte(v)))
	}
	if h.UpstreamAPIKey != "" {
		v, err := repl.ReplaceOrErr(h.UpstreamAPIKey, true, true)
		if err != nil {
			return fmt.Errorf("upstream_api_key: %v", err)
		}
		h.upstream = strings.TrimSpace(v)
	}
	if h.MaxBodyBytes == 0 {
		h.MaxBodyBytes = 8 << 20
	}
	h.parseCfg = policies.ParseConfig{Deployment: h.Deployment, BlockSize: h.BlockSize, MaxBlocks: h.MaxBlocks}
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
	return nil
}

// ServeHTTP authenticates, parses, routes and accounts for one request.
func (h *LLMRoute) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if len(h.keyHashes) > 0 && !h.authorized(r) {
		metricRequests.WithLabelValues("", "", "unauthorized").Inc()
		writeAPIError(w, errUnauthorized)
		return nil
	}
	r.Header.Del("Authorization")
	r.Header.Del("X-Api-Key")
	if h.upstream != "" {
		r.Header.Set("Authorization", "Bearer "+h.upstream)
	}

	rc := &routeCtx{started: time.Now()}
	var sniff *usageSniffer
	if r.Method == http.MethodPost {
		req, body, apiErr, ok := h.readRequest(r)
		if !ok {
			metricRequests.WithLabelValues("", "", "bad_request").Inc()
			writeAPIError(w, apiErr)
			return nil
		}
		rc.req = req
		sniff = &usageSniffer{}
		if h.RequestUsage && req.Stream && !req.IncludeUsage && req.Endpoint != policies.EndpointResponses {
			if b, ok := withIncludeUsage(body); ok {
				body = b
				sniff.strip = true
			}
		}
		rc.body = body
		r.Body = attemptBody(body)
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	}
	caddyhttp.SetVar(r.Context(), routeVarKey, rc)
	// Tell a dial timeout from other transport errors (previousAttempt).
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), rc.dialTrace()))

	ww := &routeWriter{
		ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
		rc:                    rc,
		replicaHdr:            h.ReplicaHeader,
		sniff:                 sniff,
	}
	ww.onFirstBytes = func() {
		rc.firstByte()
		metricTTFB.Observe(time.Since(rc.started).Seconds())
	}

	returned := false
	defer func() {
		// Runs on return, on Caddy's abort panic (a replica died
		// mid-stream) and after a client disconnect: release once.
		h.finish(r, ww, rc, returned)
	}()
	err := next.ServeHTTP(ww, r)
	returned = true
	if err == nil || ww.wroteHeader {
		return err
	}
	// Nothing reached the client yet: answer in OpenAI's error shape.
	rc.mu.Lock()
	reject, ra := rc.reject, rc.retryAfter
	rc.mu.Unlock()
	if reject != rejectNone {
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

// finish settles the request: the replica's outcome, feedback, metrics and
// the release of every reservation still held.
func (h *LLMRoute) finish(r *http.Request, ww *routeWriter, rc *routeCtx, returned bool) {
	clientGone := r.Context().Err() != nil
	rc.mu.Lock()
	addr, strategy, attempted := rc.currentAddr, rc.strategy, rc.current != nil
	var st *replicaState
	if rc.current != nil {
		st = rc.current.replica
	}
	rc.mu.Unlock()

	o, reason, ra := outcomeNeutral, "", time.Duration(0)
	label := "ok"
	switch {
	case !returned && clientGone:
		label = "client_disconnect"
	case !returned:
		// reverse_proxy aborted: the replica broke the stream midway.
		o, reason, label = outcomeFailure, "stream_broken", "stream_broken"
	case !ww.wroteHeader && attempted:
		o, reason, ra = previousAttempt(r, rc.failStatus)
		label = "upstream_error"
	case clientGone:
		label = "client_disconnect"
	case attempted:
		o, reason = classifyStatus(ww.status, rc.failStatus)
		if o == outcomeFailure {
			ra = parseRetryAfter(ww.Header().Get("Retry-After"), time.Now())
			label = "upstream_" + reason
		} else if ww.status >= 400 {
			label = "upstream_4xx"
		}
	default:
		label = "rejected"
	}
	if attempted && o == outcomeSuccess && ww.sniff != nil {
		ww.sniff.finish()
		h.feedback(rc, st, ww.sniff)
	}
	rc.finish(o, reason, ra)
	metricRequests.WithLabelValues(strategy, addr, label).Inc()
}

// readRequest checks the content type, reads the bounded body once and
// parses it.
func (h *LLMRoute) readRequest(r *http.Request) (*policies.Request, []byte, apiError, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, nil, errContentType, false
		}
	} else if r.ContentLength != 0 {
		return nil, nil, errContentType, false
	}
	if r.ContentLength > h.MaxBodyBytes {
		return nil, nil, errTooLarge, false
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		// + MinRead: ReadFrom wants MinRead free bytes before every read,
		// including the one that sees EOF; without them the buffer is
		// reallocated at twice the size once the body is in.
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(r.Body, h.MaxBodyBytes+1))
	if err != nil {
		return nil, nil, errBodyRead, false
	}
	if n > h.MaxBodyBytes {
		return nil, nil, errTooLarge, false
	}
	body := buf.Bytes()
	req, err := policies.Parse(r.URL.Path, body, h.parseCfg)
	switch {
	case errors.Is(err, policies.ErrMissingModel):
		return nil, nil, errNoModel, false
	case err != nil:
		return nil, nil, errMalformed, false
	}
	return req, body, apiError{}, true
}

// authorized reports whether r carries one of the configured keys. Both
// sides are hashed to a fixed length and every key is compared, so neither
// a key's length nor which key matched shows in the timing.
func (h *LLMRoute) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		tok = r.Header.Get("X-Api-Key")
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	match := 0
	for i := range h.keyHashes {
		match |= subtle.ConstantTimeCompare(sum[:], h.keyHashes[i][:])
	}
	return match == 1
}

// withIncludeUsage returns body with stream_options.include_usage set, when
// the body has no stream_options of its own. It copies the body once.
func withIncludeUsage(body []byte) ([]byte, bool) {
	if bytes.Contains(body, []byte(`"stream_options"`)) {
		return nil, false
	}
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return nil, false
	}
	const ins = `"stream_options":{"include_usage":true},`
	rest := bytes.TrimLeft(body[i+1:], " \t\r\n")
	out := make([]byte, 0, len(body)+len(ins))
	out = append(out, body[:i+1]...)
	if len(rest) > 0 && rest[0] == '}' {
		out = append(out, ins[:len(ins)-1]...)
	} else {
		out = append(out, ins...)
	}
	out = append(out, body[i+1:]...)
	return out, true
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	llm_route {
//		api_keys         <key...>
//		upstream_api_key <key>
//		deployment       <identity>
//		max_body_bytes   <size>
//		block_size       <bytes>
//		max_blocks       <n>
//		replica_header   <name>
//		request_usage
//	}
func (h *LLMRoute) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // consume directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "api_keys", "api_key":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			h.APIKeys = append(h.APIKeys, args...)
		case "upstream_api_key":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.UpstreamAPIKey = d.Val()
		case "deployment":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.Deployment = d.Val()
		case "max_body_bytes", "max_body_size":
			if !d.NextArg() {
				return d.ArgErr()
			}
			size, err := humanizeSize(d.Val())
			if err != nil {
				return d.Errf("max_body_bytes: %v", err)
			}
			h.MaxBodyBytes = size
		case "block_size", "max_blocks":
			name := d.Val()
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := strconv.Atoi(d.Val())
			if err != nil {
				return d.Errf("%s: %v", name, err)
			}
			if name == "block_size" {
				h.BlockSize = n
			} else {
				h.MaxBlocks = n
			}
		case "replica_header":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.ReplicaHeader = d.Val()
		case "request_usage":
			h.RequestUsage = true
		default:
			return d.Errf("unrecognized llm_route option %q", d.Val())
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.Provisioner           = (*LLMRoute)(nil)
	_ caddy.Validator             = (*LLMRoute)(nil)
	_ caddyhttp.MiddlewareHandler = (*LLMRoute)(nil)
	_ caddyfile.Unmarshaler       = (*LLMRoute)(nil)
)
