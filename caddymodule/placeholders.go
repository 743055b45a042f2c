package caddymodule

import (
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/llmroute/caddy-llmroute/admission"
)

// The {llm.*} placeholders, for logs, headers and expression matchers:
// {llm.model}, {llm.endpoint}, {llm.stream}, {llm.session} (describe) and
// {llm.tenant}, {llm.priority} (admitTenant). They are answered when a
// placeholder is replaced, from the request's routing context, by one
// provider added to the request's replacer: setting each as a static value
// cost a map insertion (and often a map growth) and a boxed value per
// placeholder on every request, read or not.

// placeholderPrefix begins every placeholder llm_route answers.
const placeholderPrefix = "llm."

// placeholderValues are what the placeholders answer beyond the routing
// context's own request and session; the handler fills them in before the
// request goes on, and nothing changes them after.
type placeholderValues struct {
	endpoint string
	// named is set once the tenant is known: tenant and band answer
	// {llm.tenant} and {llm.priority} from then on.
	named  bool
	tenant string
	band   admission.Priority
}

// providePlaceholders adds rc's placeholders to r's replacer.
func providePlaceholders(r *http.Request, rc *routeCtx) {
	if repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); repl != nil {
		repl.Map(rc.placeholder)
	}
}

// placeholder answers one {llm.*} placeholder (a caddy.ReplacerFunc).
func (rc *routeCtx) placeholder(key string) (any, bool) {
	name, ok := strings.CutPrefix(key, placeholderPrefix)
	if !ok {
		return nil, false
	}
	v := &rc.ph
	switch name {
	case "model":
		if rc.req == nil {
			return "", true
		}
		return rc.req.Model, true
	case "endpoint":
		return v.endpoint, true
	case "stream":
		return rc.req != nil && rc.req.Stream, true
	case "session":
		return rc.session, true
	case "tenant":
		return v.tenant, v.named
	case "priority":
		if !v.named {
			return nil, false
		}
		return v.band.String(), true
	}
	return nil, false
}
