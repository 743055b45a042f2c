package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/stretchr/testify/require"
)

// TestJSONMediaType holds the fast path for the common spelling to
// mime.ParseMediaType's answer for every other one.
func TestJSONMediaType(t *testing.T) {
	for _, tc := range []struct {
		ct   string
		want bool
	}{
		{"application/json", true},
		{"application/json; charset=utf-8", true},
		{"Application/JSON", true},
		{"application/vnd.api+json", true},
		{"application/problem+json; charset=utf-8", true},
		{"text/plain", false},
		{"application/jsonl", false},
		{"application/x-www-form-urlencoded", false},
		{"application/json; =bad", false},
		{";", false},
	} {
		require.Equal(t, tc.want, jsonMediaType(tc.ct), tc.ct)
	}
}

// TestSetContentLength: a header that already says n is left as it is
// (the same backing slice, nothing allocated); another value, several
// values or none become exactly n.
func TestSetContentLength(t *testing.T) {
	h := http.Header{"Content-Length": {"4096"}}
	before := &h["Content-Length"][0]
	require.Zero(t, testing.AllocsPerRun(10, func() { setContentLength(h, 4096) }))
	require.Equal(t, []string{"4096"}, h["Content-Length"])
	require.Same(t, before, &h["Content-Length"][0])

	setContentLength(h, 4130) // include_usage added
	require.Equal(t, []string{"4130"}, h["Content-Length"])
	require.Equal(t, "4130", h.Get("Content-Length"))

	h = http.Header{"Content-Length": {"1", "2"}}
	setContentLength(h, 7)
	require.Equal(t, []string{"7"}, h["Content-Length"])

	h = http.Header{}
	setContentLength(h, 0)
	require.Equal(t, []string{"0"}, h["Content-Length"])
}

// TestSessionHeadersAnySpelling: session_headers given in any case name
// the same header once provisioned (and unprovisioned, as given).
func TestSessionHeadersAnySpelling(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	h := &LLMRoute{SessionHeaders: []string{"x-conversation-ID", "X-Session-Id"}}
	require.NoError(t, h.Provision(ctx))
	require.Equal(t, []string{"X-Conversation-Id", "X-Session-Id"}, h.sessionHdrs)
	require.Equal(t, []string{"x-conversation-ID", "X-Session-Id"}, h.SessionHeaders, "the config is kept as written")

	r := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader("{}"))
	r.Header.Set("X-CONVERSATION-ID", " conv-1 ")
	r.Header.Set("X-Session-Id", "other")
	require.Equal(t, "conv-1", h.sessionOf(r, nil))
	require.Equal(t, "conv-1", (&LLMRoute{SessionHeaders: h.SessionHeaders}).sessionOf(r, nil))

	r.Header.Del("X-Conversation-Id")
	require.Equal(t, "other", h.sessionOf(r, nil))
}
