package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/assert"

	"github.com/llmroute/caddy-llmroute/admission"
	"github.com/llmroute/caddy-llmroute/policies"
)

// TestPlaceholders proves what each {llm.*} placeholder answers through
// the request's replacer, before and after the tenant is named, and that
// the provider leaves every other placeholder to Caddy.
func TestPlaceholders(t *testing.T) {
	tests := []struct {
		name    string
		path    string
		req     *policies.Request
		session string
		tenant  string
		band    admission.Priority
		want    string
	}{
		{name: "chat, streamed, with session and tenant", path: "/v1/chat/completions",
			req: &policies.Request{Model: "m1", Stream: true}, session: "s-1", tenant: "acme", band: admission.Critical,
			want: "m1|chat/completions|true|s-1|acme|critical|kept"},
		{name: "messages, not streamed, no tenant", path: "/v1/messages",
			req:  &policies.Request{Model: "claude"},
			want: "claude|messages|false|-|-|-|kept"},
		{name: "no body", path: "/v1/models", tenant: "default", band: admission.Standard,
			want: "-|models|false|-|default|standard|kept"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			repl := caddy.NewReplacer()
			repl.Set("other.value", "kept")
			ctx := context.WithValue(context.Background(), caddy.ReplacerCtxKey, repl)
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, tt.path, nil)
			if tt.session != "" {
				r.Header.Set("X-Session-Id", tt.session)
			}
			rc := newRouteCtx(time.Unix(1700000000, 0), tt.req, nil)
			h := &LLMRoute{}
			h.describe(r, rc)
			if tt.tenant != "" {
				nameRequest(r, rc, tt.tenant, tt.band, false)
			}
			got := repl.ReplaceAll("{llm.model}|{llm.endpoint}|{llm.stream}|{llm.session}|{llm.tenant}|{llm.priority}|{other.value}", "-")
			assert.Equal(t, tt.want, got)
			_, ok := repl.Get("llm.unknown")
			assert.False(t, ok, "an unknown llm.* placeholder stays unknown")
		})
	}
}
