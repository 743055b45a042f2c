package caddymodule

import (
	"net/http"
	"path"
	"strings"
)

// inferenceAPI is what reaches the replicas by default: the inference
// endpoints of OpenAI, Anthropic, vLLM and SGLang, each with the one
// method it serves. Engines also serve administrative endpoints on the
// same port (vLLM's /reset_prefix_cache, /sleep; SGLang's /flush_cache,
// /update_weights_from_disk; every engine's /metrics) that a key holder
// must not reach through the gateway.
var inferenceAPI = map[string]string{
	"/v1/chat/completions":      http.MethodPost,
	"/v1/completions":           http.MethodPost,
	"/v1/responses":             http.MethodPost,
	"/v1/messages":              http.MethodPost,
	"/v1/messages/count_tokens": http.MethodPost,
	"/v1/embeddings":            http.MethodPost,
	"/v1/rerank":                http.MethodPost,
	"/v2/rerank":                http.MethodPost,
	"/rerank":                   http.MethodPost,
	"/v1/score":                 http.MethodPost,
	"/score":                    http.MethodPost,
	"/tokenize":                 http.MethodPost,
	"/detokenize":               http.MethodPost,
	"/v1/models":                http.MethodGet,
}

// allowed reports whether r may reach the replicas: an inference endpoint
// with its method, or a path of AllowPaths. Paths that are not clean
// (dot segments, doubled slashes, encoded slashes) never are, so that what
// is checked is what the replica sees.
func (h *LLMRoute) allowed(r *http.Request) (apiError, bool) {
	p := r.URL.Path
	if p == "" || path.Clean(p) != p || (r.URL.RawPath != "" && r.URL.RawPath != p) {
		return errNotFound, false
	}
	if m := inferenceAPI[p]; m != "" {
		if r.Method == m || (m == http.MethodGet && r.Method == http.MethodHead) {
			return apiError{}, true
		}
		if !h.allowedExtra(p) {
			e := errMethod
			e.allow = m
			return e, false
		}
	}
	if h.allowedExtra(p) {
		return apiError{}, true
	}
	return errNotFound, false
}

// allowedExtra reports whether p is listed in AllowPaths.
func (h *LLMRoute) allowedExtra(p string) bool {
	for _, a := range h.AllowPaths {
		if prefix, ok := strings.CutSuffix(a, "*"); ok {
			if strings.HasPrefix(p, prefix) {
				return true
			}
		} else if p == a {
			return true
		}
	}
	return false
}

// endpointName names the API a path serves, for {llm.endpoint}: the path
// without its version prefix ("chat/completions", "messages",
// "embeddings"), or "" for a path outside the inference API.
func endpointName(p string) string {
	if _, ok := inferenceAPI[p]; !ok {
		return ""
	}
	for _, v := range []string{"/v1/", "/v2/", "/"} {
		if rest, ok := strings.CutPrefix(p, v); ok {
			return rest
		}
	}
	return p
}

// notServed is the answer to a request no handler after llm_route
// answered: no pool serves its model (or, without a model, its path).
func notServed(rc *routeCtx) apiError {
	if rc.req != nil && rc.req.Model != "" {
		return errModelNotFound
	}
	return errNotFound
}
