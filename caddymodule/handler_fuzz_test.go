package caddymodule

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/stretchr/testify/assert"
	"go.uber.org/zap"
)

// fuzzKey is the key the fuzzed handler accepts.
const fuzzKey = "sk-fuzz-KEY"

// FuzzHandlerRequest drives LLMRoute.ServeHTTP with arbitrary
// Authorization headers, paths, queries, Content-Types, Content-Encodings
// and bodies, in front of a next handler that selects a replica and
// answers as reverse_proxy would. For every input: no panic; the answer
// is the replica's or an error in OpenAI's shape with a known status; the
// key never appears in the answer nor reaches the replica, nor does any
// credential query parameter; a request the handler let through had an
// allowed path and a body it could read; and no reservation is left.
func FuzzHandlerRequest(f *testing.F) {
	gz := func(s string) string {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		_, _ = w.Write([]byte(s))
		_ = w.Close()
		return b.String()
	}
	chat := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, seed := range []struct{ auth, path, query, ctype, enc, body string }{
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "", chat},
		{"bearer " + fuzzKey, "/v1/chat/completions", "api_key=" + fuzzKey, "application/json", "gzip", gz(chat)},
		{"BEARER\t" + fuzzKey, "/v1/completions", "key=x&y=1", "application/json; charset=utf-8", "identity", `{"model":"m","prompt":"p"}`},
		{"Basic " + fuzzKey, "/metrics", "", "", "", ""},
		{"Bearer wrong", "/v1/chat/completions", "", "application/json", "", chat},
		{"Bearer " + fuzzKey, "/v1/../metrics", "", "application/json", "", chat},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "text/plain", "", chat},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "gzip", chat},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "br", chat},
		{"Bearer " + fuzzKey, "/v1/models", "", "", "", ""},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "", `{"model":`},
	} {
		f.Add(seed.auth, seed.path, seed.query, seed.ctype, seed.enc, []byte(seed.body))
	}
	fx := newFuzzHandler(f)
	f.Fuzz(func(t *testing.T, auth, path, query, ctype, enc string, body []byte) {
		fx.one(t, auth, path, query, ctype, enc, body)
	})
}

// fuzzHandler is the handler and policy FuzzHandlerRequest drives.
type fuzzHandler struct {
	h    *LLMRoute
	p    *LLMSelection
	pool []*reverseproxy.Upstream
}

func newFuzzHandler(tb testing.TB) *fuzzHandler {
	h := &LLMRoute{APIKeys: []string{fuzzKey}, MaxBodyBytes: 4 << 10, logger: zap.NewNop(), AllowPaths: []string{"/extra/*"}}
	if err := h.resolveKeys(caddy.NewReplacer()); err != nil {
		tb.Fatal(err)
	}
	p := &LLMSelection{Strategy: "prefix_load", MaxInFlight: 4, logger: zap.NewNop()}
	if err := p.setup(); err != nil {
		tb.Fatal(err)
	}
	pool := benchPool("fuzz", 2)
	return &fuzzHandler{h: h, p: p, pool: pool}
}

// one serves one fuzzed request and checks it; it reports whether the
// request reached the replica and the status the client got (0 for an
// input no server would hand to a handler).
func (fx *fuzzHandler) one(t *testing.T, auth, path, query, ctype, enc string, body []byte) (bool, int) {
	h, p, pool := fx.h, fx.p, fx.pool
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, " ?#\r\n\x00") || strings.ContainsAny(query, " #\r\n\x00") {
		return false, 0 // not a request line a server would hand to a handler
	}
	target := "http://fuzz" + path
	if query != "" {
		target += "?" + query
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return false, 0
	}
	ctx := context.WithValue(context.Background(), caddyhttp.VarsCtxKey, map[string]any{})
	ctx = context.WithValue(ctx, caddy.ReplacerCtxKey, caddy.NewReplacer())
	method := http.MethodPost
	if len(body) == 0 {
		method = http.MethodGet
	}
	r := httptest.NewRequestWithContext(ctx, method, "http://fuzz/", bytes.NewReader(body))
	r.URL, r.RequestURI = u, u.RequestURI()
	r.ContentLength = int64(len(body))
	for k, v := range map[string]string{"Authorization": auth, "Content-Type": ctype, "Content-Encoding": enc} {
		if v != "" && !strings.ContainsAny(v, "\r\n") {
			r.Header.Set(k, v)
		}
	}
	reached := false
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		reached = true
		if _, ok := inferenceAPI[r.URL.Path]; !ok && !h.allowedExtra(r.URL.Path) {
			t.Fatalf("path %q reached the replica", r.URL.Path)
		}
		if strings.Contains(r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"), fuzzKey) {
			t.Fatal("the client's key reached the replica")
		}
		for k := range r.URL.Query() {
			for _, c := range credentialParams {
				if strings.EqualFold(k, c) {
					t.Fatalf("credential parameter %q reached the replica", k)
				}
			}
		}
		if r.Header.Get("Content-Encoding") != "" {
			t.Fatal("a Content-Encoding reached the replica")
		}
		if p.Select(pool, r, w) == nil {
			return fmt.Errorf("no upstream")
		}
		got, _ := io.ReadAll(r.Body)
		if int64(len(got)) > h.MaxBodyBytes {
			t.Fatalf("a %d-byte body passed the %d-byte limit", len(got), h.MaxBodyBytes)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"object":"chat.completion","choices":[]}`))
		return nil
	})
	w := httptest.NewRecorder()
	if err := h.ServeHTTP(w, r, next); err != nil {
		t.Fatalf("ServeHTTP returned %v", err)
	}
	for _, u := range pool {
		if n := p.state(u.String()).inFlightNow(); n != 0 {
			t.Fatalf("%s: %d reservations left", u, n)
		}
	}
	out := w.Body.String()
	if strings.Contains(out, fuzzKey) {
		t.Fatal("the key appears in the answer")
	}
	if reached && w.Code == http.StatusOK {
		return true, w.Code
	}
	if !reached && w.Code == http.StatusOK {
		// Only GET /v1/models is answered by the gateway itself.
		if u.Path != "/v1/models" || !strings.Contains(out, `"object":"list"`) {
			t.Fatalf("%s %s answered 200 by the gateway: %s", method, u.Path, out)
		}
		return false, w.Code
	}
	switch w.Code {
	case 400, 401, 404, 405, 413, 415, 502, 503:
	default:
		t.Fatalf("status %d: %s", w.Code, out)
	}
	var e struct {
		Error *struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal([]byte(out), &e) != nil || e.Error == nil || e.Error.Message == "" || e.Error.Type == "" {
		t.Fatalf("status %d without an OpenAI error body: %q", w.Code, out)
	}
	return reached, w.Code
}

// TestFuzzSeedsAreJudged runs FuzzHandlerRequest's kinds of input with
// known answers, so that the fuzz property is not met vacuously: good
// requests reach the replica, bad ones are refused with their status.
func TestFuzzSeedsAreJudged(t *testing.T) {
	fx := newFuzzHandler(t)
	chat := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	for _, tt := range []struct {
		auth, path, query, ctype, enc string
		body                          []byte
		reached                       bool
		status                        int
	}{
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "", chat, true, 200},
		{"bearer " + fuzzKey, "/v1/chat/completions", "api_key=" + fuzzKey, "application/json", "", chat, true, 200},
		{"Bearer " + fuzzKey, "/v1/models", "", "", "", nil, false, 200}, // the gateway's own list
		{"Bearer " + fuzzKey, "/extra/x", "", "application/json", "", chat, true, 200},
		{"Basic " + fuzzKey, "/v1/chat/completions", "", "application/json", "", chat, false, 401},
		{"Bearer " + fuzzKey, "/metrics", "", "", "", nil, false, 404},
		{"Bearer " + fuzzKey, "/v1/models/../metrics", "", "", "", nil, false, 404},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "text/plain", "", chat, false, 415},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "gzip", chat, false, 400},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "br", chat, false, 415},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "", bytes.Repeat([]byte(" "), 8<<10), false, 413},
		{"Bearer " + fuzzKey, "/v1/chat/completions", "", "application/json", "", []byte(`{"model":`), false, 400},
	} {
		reached, status := fx.one(t, tt.auth, tt.path, tt.query, tt.ctype, tt.enc, tt.body)
		assert.Equal(t, tt.reached, reached, "%s %s", tt.auth, tt.path)
		assert.Equal(t, tt.status, status, "%s %s", tt.auth, tt.path)
	}
}
