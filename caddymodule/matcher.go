package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/llmroute/caddy-llmroute/policies"
)

func init() {
	caddy.RegisterModule(MatchLLMModel{})
}

// MatchLLMModel matches requests by the model their body names, so that
// one site can send each model to its own pool:
//
//	@llama llm_model llama-3.1-8b*
//	reverse_proxy @llama 127.0.0.1:9001 127.0.0.1:9002 { lb_policy llm }
//
// Each entry is an exact model name or a pattern where `*` stands for any
// run of characters (model names may hold slashes, as in
// meta-llama/Llama-3.1-8B). It reads the model llm_route already parsed;
// without llm_route it reads the body itself, bounded like llm_route's
// default (8 MiB), and puts it back. A request without a model (no body,
// not JSON, no model field) matches nothing; llm_route then answers
// model_not_found itself.
type MatchLLMModel []string

// CaddyModule returns the Caddy module information.
func (MatchLLMModel) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.matchers.llm_model",
		New: func() caddy.Module { return new(MatchLLMModel) },
	}
}

// Provision adds the exact model names (no `*`) to the models the
// metrics label by name (modellabels.go).
func (m MatchLLMModel) Provision(caddy.Context) error {
	knownModels.configure(m)
	return nil
}

// Match reports whether r's model matches one of the patterns.
func (m MatchLLMModel) Match(r *http.Request) bool {
	ok, _ := m.MatchWithError(r)
	return ok
}

// MatchWithError reports whether r's model matches one of the patterns.
func (m MatchLLMModel) MatchWithError(r *http.Request) (bool, error) {
	model := requestModel(r)
	if model == "" {
		return false, nil
	}
	for _, p := range m {
		if globMatch(p, model) {
			return true, nil
		}
	}
	return false, nil
}

// modelVarKey caches the model a matcher read itself, for the next one.
const modelVarKey = "llmroute.model"

// requestModel returns the model r's body names: from llm_route's routing
// context, else from a bounded read of the body (put back for the handlers
// after), cached in the request's vars.
func requestModel(r *http.Request) string {
	if rc := getRouteCtx(r); rc != nil {
		if rc.req == nil {
			return ""
		}
		return rc.req.Model
	}
	if v, ok := caddyhttp.GetVar(r.Context(), modelVarKey).(string); ok {
		return v
	}
	model := ""
	if r.Body != nil && r.Body != http.NoBody {
		const limit = defaultMaxBodyBytes
		b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
		if err == nil && len(b) <= limit {
			if req, err := policies.Parse(r.URL.Path, b, policies.ParseConfig{}); err == nil {
				model = req.Model
			}
		}
	}
	caddyhttp.SetVar(r.Context(), modelVarKey, model)
	return model
}

// globMatch reports whether s matches pattern, where `*` stands for any
// run of characters and everything else for itself.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last) && len(s) >= len(last)
}

// Interface guards
var (
	_ caddy.Provisioner                 = (*MatchLLMModel)(nil)
	_ caddyhttp.RequestMatcherWithError = (*MatchLLMModel)(nil)
	_ caddyhttp.RequestMatcher          = (*MatchLLMModel)(nil)
	_ caddyfile.Unmarshaler             = (*MatchLLMModel)(nil)
)
