package caddymodule

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestLeaveOutOtherModels proves the model filter: a replica whose known
// list lacks the model is left out while another lists it (an adapter by
// its id, a base model through an adapter's parent); unknown lists stay
// in; when none lists it nobody is left out.
func TestLeaveOutOtherModels(t *testing.T) {
	now := time.Now()
	base := "qwen"
	set := func(addr string, ids ...string) {
		var ms []modelEntry
		for _, id := range ids {
			e := modelEntry{ID: id, Object: "model"}
			if id == "lora-a" {
				e.Parent = &base
			}
			ms = append(ms, e)
		}
		modelCache.Store(addr, &replicaModels{at: now, models: ms, ok: true})
		t.Cleanup(func() { modelCache.Delete(addr); recheckLists() })
	}
	set("10.9.0.1:8000", "qwen", "lora-a")
	set("10.9.0.2:8000", "qwen")
	set("10.9.0.3:8000", "lora-a")
	recheckLists()
	require.True(t, listsDiffer.Load())
	view := func() []policies.Replica {
		return []policies.Replica{{Addr: "10.9.0.1:8000"}, {Addr: "10.9.0.2:8000"}, {Addr: "10.9.0.3:8000"}, {Addr: "10.9.0.4:8000"}}
	}
	avail := func(v []policies.Replica) (out []int) {
		for i := range v {
			if !v[i].Unavailable {
				out = append(out, i)
			}
		}
		return out
	}
	for _, c := range []struct {
		model string
		want  []int
	}{
		{"lora-a", []int{0, 2, 3}},   // .2 lists only qwen; .4's list is unknown
		{"qwen", []int{0, 1, 2, 3}},  // .3 runs lora-a, whose parent is qwen
		{"other", []int{0, 1, 2, 3}}, // nobody lists it: as without lists
		{"", []int{0, 1, 2, 3}},
	} {
		v := view()
		leaveOutOtherModels(v, c.model, now)
		assert.Equal(t, c.want, avail(v), c.model)
	}
	v := view()
	v[0].Unavailable, v[2].Unavailable = true, true // the ones with lora-a are cooling
	leaveOutOtherModels(v, "lora-a", now)
	assert.Equal(t, []int{1, 3}, avail(v), "none available lists it: nobody left out")
	v = view()
	leaveOutOtherModels(v, "lora-a", now.Add(modelListAge+time.Second))
	assert.Equal(t, []int{0, 1, 2, 3}, avail(v), "stale lists are unknown")
}

// TestModelAwareChoiceThroughCaddy sends requests for an adapter that one
// of two replicas serves: every request lands there once the gateway has
// the lists, where without the filter half went to the replica answering
// 404.
func TestModelAwareChoiceThroughCaddy(t *testing.T) {
	serve := func(models string, hits *atomic.Int64) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Path == "/v1/models" {
				fmt.Fprintf(w, `{"object":"list","data":[%s]}`, models)
				return
			}
			hits.Add(1)
			fmt.Fprint(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`)
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}
	var withA, without atomic.Int64
	a := serve(`{"id":"qwen","object":"model"},{"id":"lora-a","object":"model","parent":"qwen"}`, &withA)
	b := serve(`{"id":"qwen","object":"model"}`, &without)
	r := startRouter(t, fmt.Sprintf(`
	llm_route
	reverse_proxy %s %s {
		lb_policy llm least_load
	}`, a, b))
	// Both replicas' own lists, not only the flag (another test's
	// replicas may have left it set); a list fetch that failed under a
	// loaded machine is asked again.
	known := func(addr string) bool {
		v, ok := modelCache.Load(addr)
		if !ok {
			return false
		}
		rm := v.(*replicaModels)
		rm.mu.Lock()
		defer rm.mu.Unlock()
		return rm.ok
	}
	waitFor(t, "both lists fetched and compared", func() bool {
		resp, err := http.Get(r.url("/v1/models"))
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return known(a) && known(b) && listsDiffer.Load()
	})
	for i := range 12 {
		body := fmt.Sprintf(`{"model":"lora-a","messages":[{"role":"user","content":"q%d"}]}`, i)
		resp := post(t, r.url("/v1/chat/completions"), "", "", "", body)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	assert.Equal(t, int64(12), withA.Load(), "every request to the replica serving the adapter")
	assert.Zero(t, without.Load())
}

// TestPreferRunningAdapter proves the LoRA preference: replicas running
// the adapter now take the pick while one of them is free; when all of
// them are full the others stay candidates; a base model is unaffected.
func TestPreferRunningAdapter(t *testing.T) {
	view := func() []policies.Replica {
		return []policies.Replica{{Addr: "a"}, {Addr: "b"}, {Addr: "c", Unavailable: true}}
	}
	runs := func(set ...int) func(int) bool {
		return func(i int) bool {
			for _, s := range set {
				if s == i {
					return true
				}
			}
			return false
		}
	}
	v := view()
	assert.Equal(t, 1, preferRunningAdapter(v, "sql-lora", runs(0)))
	assert.False(t, v[0].Unavailable)
	assert.True(t, v[1].Unavailable, "not running it: left out")
	v = view()
	v[0].Cap, v[0].InFlight = 1, 1
	assert.Zero(t, preferRunningAdapter(v, "sql-lora", runs(0)), "the one running it is full")
	assert.False(t, v[1].Unavailable)
	v = view()
	assert.Zero(t, preferRunningAdapter(v, "sql-lora", runs(2)), "the one running it is cooling")
	assert.Zero(t, preferRunningAdapter(view(), "", runs(0)))

	s := parseFixture(t, "vllm_dp2.metrics")
	assert.ElementsMatch(t, []string{"sql-lora", "chat-lora"}, s.adapters, "the newest series")
	now := time.Now()
	e := engineLoad{at: now, staleAfter: time.Second, adapters: "sql-lora,chat-lora"}
	assert.True(t, e.runs(now, "chat-lora"))
	assert.False(t, e.runs(now, "chat"))
	assert.False(t, e.runs(now.Add(2*time.Second), "chat-lora"), "a stale sample says nothing")
}
