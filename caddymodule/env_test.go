package caddymodule

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/policies"
)

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	// netx never hands a port out twice: the admin endpoint and the site
	// sharing one would both bind (Caddy sets SO_REUSEPORT) and the site's
	// requests would reach the admin endpoint.
	p, err := netx.FreePort()
	require.NoError(t, err)
	return p
}

// router is an in-process Caddy with llmroute loaded.
type router struct {
	t     *testing.T
	port  int
	admin int
}

func (r *router) url(path string) string { return fmt.Sprintf("http://127.0.0.1:%d%s", r.port, path) }

// startRouter adapts a Caddyfile site body (with %s for the listen port
// already filled by the caller via {PORT}) and loads it in-process.
func startRouter(t *testing.T, site string) *router {
	t.Helper()
	r := &router{t: t, port: freePort(t), admin: freePort(t)}
	r.load(site)
	t.Cleanup(func() {
		_ = caddy.Stop()
	})
	return r
}

// load (re)loads the config; used for reloads under traffic.
func (r *router) load(site string) {
	r.t.Helper()
	cf := fmt.Sprintf("{\n\tadmin 127.0.0.1:%d\n\tpersist_config off\n\tauto_https off\n\tskip_install_trust\n\tlog {\n\t\tlevel ERROR\n\t}\n}\n:%d {\n%s\n}\n", r.admin, r.port, site)
	cfg, warn, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	require.NoError(r.t, err, "adapt: %v", warn)
	require.NoError(r.t, caddy.Load(cfg, true))
	// The reload closes the old server's idle keep-alive connections; a
	// POST sent on one of them as it closes fails with EOF and is not
	// replayed by net/http. Real clients retry; these tests start afresh.
	http.DefaultClient.CloseIdleConnections()
}

// doAfterReload sends the request newReq makes as the first after a
// reload: a connection the old server accepted as it shut down fails
// before any answer (EOF, or a reset while dialing), and the request is
// made and sent again, up to 3 times, as clients do on connection errors.
// Only a request that got no answer is sent again.
func doAfterReload(t *testing.T, newReq func() *http.Request) *http.Response {
	t.Helper()
	for attempt := 0; ; attempt++ {
		resp, err := http.DefaultClient.Do(newReq())
		if err == nil || attempt == 2 {
			require.NoError(t, err)
			return resp
		}
		http.DefaultClient.CloseIdleConnections()
	}
}

// state reads /llm_route/state from the admin API.
func (r *router) state() stateapi.State {
	r.t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/llm_route/state", r.admin))
	require.NoError(r.t, err)
	defer resp.Body.Close()
	var st stateapi.State
	require.NoError(r.t, json.NewDecoder(resp.Body).Decode(&st))
	return st
}

// replica returns the state of addr (zero value if unknown).
func (r *router) replica(addr string) stateapi.Replica {
	for _, s := range r.state().Replicas {
		if s.Addr == addr {
			return s
		}
	}
	return stateapi.Replica{}
}

// requireDrained waits (bounded) until no reservation is held on the given
// replicas, then asserts it.
func (r *router) requireDrained(addrs ...string) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		busy := 0
		for _, s := range r.state().Replicas {
			for _, a := range addrs {
				if s.Addr == a {
					busy += s.InFlight
				}
			}
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			require.Failf(r.t, "reservations leaked", "%d still held on %v", busy, addrs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fake is a purpose-built replica: it counts requests per X-Request-Id and
// its peak concurrency, and obeys a per-request X-Fake header.
type fake struct {
	srv      *http.Server
	addr     string
	mu       sync.Mutex
	seen     map[string]int
	lastAuth string
	lastBody string
	lastURL  string
	lastHdr  http.Header
	cur, max atomic.Int64
	total    atomic.Int64
	canceled atomic.Int64
	hold     chan struct{} // when non-nil, requests wait on it before answering
	fault    atomic.Value  // string: the fault for requests without X-Fake
}

func (f *fake) setFault(s string) { f.fault.Store(s) }

func (f *fake) setHold(c chan struct{}) {
	f.mu.Lock()
	f.hold = c
	f.mu.Unlock()
}

func newFake(t *testing.T) *fake {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &fake{addr: l.Addr().String(), seen: map[string]int{}}
	f.srv = &http.Server{Handler: f}
	go func() { _ = f.srv.Serve(l) }()
	t.Cleanup(func() { _ = f.srv.Close() })
	return f
}

// last returns what the fake saw of the last request: its URI, headers
// and body.
func (f *fake) last() (uri string, hdr http.Header, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastURL, f.lastHdr, f.lastBody
}

func (f *fake) count(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[id]
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.total.Add(1)
	f.mu.Lock()
	f.seen[r.Header.Get("X-Request-Id")]++
	f.lastAuth = r.Header.Get("Authorization")
	f.lastBody = string(body)
	f.lastURL = r.URL.RequestURI()
	f.lastHdr = r.Header.Clone()
	hold := f.hold
	f.mu.Unlock()
	n := f.cur.Add(1)
	defer f.cur.Add(-1)
	for {
		m := f.max.Load()
		if n <= m || f.max.CompareAndSwap(m, n) {
			break
		}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-r.Context().Done():
			f.canceled.Add(1)
			return
		case <-time.After(10 * time.Second):
		}
	}
	fault := r.Header.Get("X-Fake")
	if g, _ := f.fault.Load().(string); fault == "" && g != "" {
		fault = g
	}
	switch {
	case fault == "429" || fault == "503" || fault == "500":
		code := map[string]int{"429": 429, "503": 503, "500": 500}[fault]
		w.Header().Set("Retry-After", "2")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, `{"error":{"message":"busy","type":"server_error"}}`)
		return
	case fault == "stall":
		select {
		case <-r.Context().Done():
			f.canceled.Add(1)
		case <-time.After(10 * time.Second):
		}
		return
	case strings.HasPrefix(fault, "cut"), fault == "slow":
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < 3; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"t%d\"}}]}\n\n", i)
			fl.Flush()
			if fault == "slow" {
				select {
				case <-r.Context().Done():
					f.canceled.Add(1)
					return
				case <-time.After(300 * time.Millisecond):
				}
			}
		}
		if fault == "cut" {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	if strings.Contains(string(body), `"stream":true`) {
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\n")
		fl.Flush()
		if strings.Contains(string(body), `"include_usage":true`) {
			fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":32}}}\n\n")
		}
		fmt.Fprint(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}`)
}

// chatBody returns a small chat request body.
func chatBody(system, user string, stream bool) string {
	b, _ := json.Marshal(map[string]any{
		"model":    "m",
		"stream":   stream,
		"messages": []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": user}},
	})
	return string(b)
}

// post sends a chat request with the given key, id and fault.
func post(t *testing.T, url, key, id, fault, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	if fault != "" {
		req.Header.Set("X-Fake", fault)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	return resp
}

// readSSE reads a stream and reports its data lines and whether it ended
// with [DONE] and a clean EOF.
func readSSE(resp *http.Response) (lines []string, done bool, err error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			lines = append(lines, d)
			if d == "[DONE]" {
				done = true
			}
		}
	}
	return lines, done, sc.Err()
}

// apiErr decodes an OpenAI-style error body.
func apiErr(t *testing.T, resp *http.Response) (typ, code string) {
	t.Helper()
	defer resp.Body.Close()
	var b struct {
		Error struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		} `json:"error"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&b))
	require.NotEmpty(t, b.Error.Message)
	if b.Error.Code != nil {
		code = *b.Error.Code
	}
	return b.Error.Type, code
}

// newRouteCtx returns a routing context as the handler sets one up.
func newRouteCtx(now time.Time, req *policies.Request, body []byte) *routeCtx {
	rc := new(routeCtx)
	rc.init(now, req, body)
	return rc
}
