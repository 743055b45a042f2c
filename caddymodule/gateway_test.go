package caddymodule

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGlobMatch proves the model patterns: exact names, and `*` for any
// run of characters, slashes included.
func TestGlobMatch(t *testing.T) {
	for _, tt := range []struct {
		pattern, s string
		want       bool
	}{
		{"llama-3.1-8b", "llama-3.1-8b", true},
		{"llama-3.1-8b", "llama-3.1-8b-instruct", false},
		{"llama-3.1-8b*", "llama-3.1-8b-instruct", true},
		{"llama-3.1-8b*", "llama-3.1-70b", false},
		{"qwen3-*", "qwen3-32b", true},
		{"qwen3-*", "qwen3-", true},
		{"*", "anything/at-all", true},
		{"meta-llama/*-8B*", "meta-llama/Llama-3.1-8B-Instruct", true},
		{"meta-llama/*-8B*", "meta-llama/Llama-3.1-70B", false},
		{"*a*a", "aa", true},
		{"*a*a", "a", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
	} {
		assert.Equal(t, tt.want, globMatch(tt.pattern, tt.s), "%q ~ %q", tt.pattern, tt.s)
	}
}

// modelsServer is a replica that lists the given models at /v1/models and
// answers anything else with a chat completion naming itself.
func modelsServer(t *testing.T, models ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/models" {
			l := modelList{Object: "list"}
			for _, m := range models {
				l.Data = append(l.Data, modelEntry{ID: m, Object: "model", OwnedBy: "test"})
			}
			_ = json.NewEncoder(w).Encode(l)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Served-By", addr)
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[]}`)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return addr
}

// TestRouteByModel proves, through Caddy, that llm_model sends each model
// to its own pool, that a model no pool serves gets 404 model_not_found
// (not a random pool, not an empty 200), that GET /v1/models lists the
// models of every pool from the replicas' own lists, and that the
// placeholders carry the model.
func TestRouteByModel(t *testing.T) {
	a1, a2 := modelsServer(t, "llama-3.1-8b-instruct"), modelsServer(t, "llama-3.1-8b-instruct")
	b1 := modelsServer(t, "qwen3-32b")
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	@llama llm_model llama-3.1-8b*
	reverse_proxy @llama %s %s {
		lb_policy llm
		header_down X-Routed-Model {llm.model}
	}
	@qwen llm_model qwen3-*
	reverse_proxy @qwen %s {
		lb_policy llm
		header_down X-Routed-Model {llm.model}
	}`, a1, a2, b1))
	served := map[string]string{}
	for i := range 6 {
		for _, model := range []string{"llama-3.1-8b-instruct", "qwen3-32b"} {
			body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"q%d"}]}`, model, i)
			resp := post(t, r.url("/v1/chat/completions"), "", "", "", body)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, model, resp.Header.Get("X-Routed-Model"))
			served[resp.Header.Get("X-Served-By")] = model
		}
	}
	assert.Equal(t, "qwen3-32b", served[b1])
	for addr, m := range served {
		if addr != b1 {
			assert.Equal(t, "llama-3.1-8b-instruct", m, "%s served another pool's model", addr)
		}
	}

	resp := post(t, r.url("/v1/chat/completions"), "", "", "", `{"model":"mistral-7b","messages":[{"role":"user","content":"x"}]}`)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	_, code := apiErr(t, resp)
	assert.Equal(t, "model_not_found", code)

	resp, err := http.Get(r.url("/v1/models"))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var l modelList
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&l))
	assert.Equal(t, "list", l.Object)
	var ids []string
	for _, m := range l.Data {
		ids = append(ids, m.ID)
		assert.Equal(t, "model", m.Object)
	}
	assert.Equal(t, []string{"llama-3.1-8b-instruct", "qwen3-32b"}, ids)
}

// TestModelMatcherWithoutLLMRoute proves the matcher reads the body itself
// when llm_route did not run, and puts it back whole for the replica.
func TestModelMatcherWithoutLLMRoute(t *testing.T) {
	a, b := newFake(t), newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	@a llm_model model-a
	reverse_proxy @a %s
	@b llm_model model-b
	reverse_proxy @b %s`, a.addr, b.addr))
	body := `{"model":"model-b","messages":[{"role":"user","content":"` + strings.Repeat("y", 5000) + `"}]}`
	resp := post(t, r.url("/v1/chat/completions"), "", "", "", body)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_, _, got := b.last()
	assert.Equal(t, body, got, "the replica must get the whole body back")
	assert.Zero(t, a.total.Load())
}

// TestSessionStickiness proves that requests naming a session stay on the
// replica that served it last although their prompts differ, that a new
// session's first placement spreads sessions over the replicas, and that
// a session moves (and then stays moved) when its replica is past the
// load bound.
func TestSessionStickiness(t *testing.T) {
	f := []*fake{newFake(t), newFake(t), newFake(t)}
	addrs := []string{f[0].addr, f[1].addr, f[2].addr}
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		replica_header X-LLMRoute-Replica
	}
	reverse_proxy %s {
		lb_policy llm prefix_load {
			max_in_flight 32
		}
	}`, strings.Join(addrs, " ")))
	send := func(session, prompt string) string {
		req, err := http.NewRequest(http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(chatBody("", prompt, false)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Session-Id", session)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp.Header.Get("X-LLMRoute-Replica")
	}
	homes := map[string]int{}
	for s := range 30 {
		sess := fmt.Sprint("session-", s)
		home := send(sess, "first prompt of "+sess)
		homes[home]++
		for turn := range 3 {
			assert.Equal(t, home, send(sess, fmt.Sprintf("an unrelated prompt %d %d", s, turn)), "session %s left its replica", sess)
		}
	}
	assert.Len(t, homes, 3, "new sessions must spread over the replicas: %v", homes)

	// Hold every replica: turns of one session pile up on its home until
	// it is past the load bound (a held request counts twice: it awaits
	// its first byte), then spill to another replica.
	const sess = "busy-session"
	home := send(sess, "hello")
	hold := make(chan struct{})
	for _, x := range f {
		x.setHold(hold)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(sess, fmt.Sprint("held turn ", i))
		}()
	}
	var onHome, elsewhere int64
	waitFor(t, "eight held turns", func() bool {
		onHome, elsewhere = 0, 0
		for _, x := range f {
			if x.addr == home {
				onHome = x.cur.Load()
			} else {
				elsewhere += x.cur.Load()
			}
		}
		return onHome+elsewhere == 8
	})
	assert.GreaterOrEqual(t, onHome, int64(2), "the session's turns must go home while it is within the bound")
	assert.Positive(t, elsewhere, "the session must spill from a replica past the load bound")
	close(hold)
	wg.Wait()
	for _, x := range f {
		x.setHold(nil)
	}
	now := send(sess, "after the storm")
	assert.Equal(t, now, send(sess, "and again"), "a session stays where its last request went")
	r.requireDrained(addrs...)
}

// TestReplicaInTwoPoolsCountsOnce proves a replica listed in two pools
// (one engine serving a base model and its adapters) keeps one in-flight
// count: requests held through one pool fill its cap for the other.
func TestReplicaInTwoPoolsCountsOnce(t *testing.T) {
	shared, spare := newFake(t), newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		replica_header X-LLMRoute-Replica
	}
	@base llm_model base
	reverse_proxy @base %s {
		lb_policy llm least_load {
			max_in_flight 2
		}
	}
	@lora llm_model base-lora-*
	reverse_proxy @lora %s %s {
		lb_policy llm least_load {
			max_in_flight 2
		}
	}`, shared.addr, shared.addr, spare.addr))
	hold := make(chan struct{})
	shared.setHold(hold)
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := post(t, r.url("/v1/chat/completions"), "", "", "", fmt.Sprintf(`{"model":"base","messages":[{"role":"user","content":"held %d"}]}`, i))
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	waitFor(t, "two base requests held on the shared replica", func() bool { return shared.cur.Load() == 2 })
	assert.Equal(t, 2, r.replica(shared.addr).InFlight, "one count for the replica, whichever pool sent")
	for i := range 3 {
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", fmt.Sprintf(`{"model":"base-lora-sql","messages":[{"role":"user","content":"adapter %d"}]}`, i))
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, spare.addr, resp.Header.Get("X-LLMRoute-Replica"), "the shared replica is at its cap through the other pool")
	}
	close(hold)
	wg.Wait()
	r.requireDrained(shared.addr, spare.addr)
}
