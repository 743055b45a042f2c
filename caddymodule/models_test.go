package caddymodule

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// modelsReplica is a replica's /v1/models: it counts the fetches, holds
// each until release is closed (when set), and answers status (200 with
// list, or an error).
type modelsReplica struct {
	target  modelsTarget
	fetches atomic.Int64
	mu      sync.Mutex
	release chan struct{}
	status  int
	list    []byte
}

func newModelsReplica(t *testing.T, list []byte) *modelsReplica {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	m := &modelsReplica{target: modelsTarget{addr: l.Addr().String(), scheme: "http"}, status: 200, list: list}
	srv := &http.Server{Handler: m}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return m
}

func (m *modelsReplica) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m.fetches.Add(1)
	m.mu.Lock()
	rel, status, list := m.release, m.status, m.list
	m.mu.Unlock()
	if rel != nil {
		select {
		case <-rel:
		case <-time.After(5 * time.Second):
		}
	}
	w.WriteHeader(status)
	_, _ = w.Write(list)
}

func (m *modelsReplica) set(status int, release chan struct{}) {
	m.mu.Lock()
	m.status, m.release = status, release
	m.mu.Unlock()
}

func modelsBody(ids ...string) []byte {
	l := modelList{Object: "list"}
	for _, id := range ids {
		l.Data = append(l.Data, modelEntry{ID: id, Object: "model"})
	}
	b, _ := json.Marshal(l)
	return b
}

// TestModelsFetchOutlivesItsClient proves the replica's list is fetched on
// a context of its own: the client that started the fetch leaves before
// the replica answers, and the next client gets the list (from the cache:
// the fetch was not repeated), not an empty one.
func TestModelsFetchOutlivesItsClient(t *testing.T) {
	m := newModelsReplica(t, modelsBody("llama"))
	rel := make(chan struct{})
	m.set(200, rel)
	h := &LLMRoute{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() {
		_, ok := h.replicaModels(ctx, m.target)
		done <- ok
	}()
	require.Eventually(t, func() bool { return m.fetches.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	cancel()
	assert.False(t, <-done, "the client that left got no list")
	close(rel)
	var got []modelEntry
	var ok bool
	require.Eventually(t, func() bool {
		got, ok = h.replicaModels(context.Background(), m.target)
		return ok
	}, 5*time.Second, 5*time.Millisecond)
	require.Len(t, got, 1)
	assert.Equal(t, "llama", got[0].ID)
	assert.Equal(t, int64(1), m.fetches.Load(), "the list was cached from the fetch the leaver started")
}

// TestModelsFetchesCollapse proves concurrent requests share one fetch
// (each either joins the fetch in flight or finds its list cached).
func TestModelsFetchesCollapse(t *testing.T) {
	m := newModelsReplica(t, modelsBody("a", "b"))
	rel := make(chan struct{})
	m.set(200, rel)
	h := &LLMRoute{}
	const n = 20
	var wg sync.WaitGroup
	var oks atomic.Int64
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if l, ok := h.replicaModels(context.Background(), m.target); ok && len(l) == 2 {
				oks.Add(1)
			}
		}()
	}
	require.Eventually(t, func() bool { return m.fetches.Load() == 1 }, 5*time.Second, 5*time.Millisecond)
	close(rel)
	wg.Wait()
	assert.Equal(t, int64(n), oks.Load())
	assert.Equal(t, int64(1), m.fetches.Load(), "concurrent requests fetched more than once")
}

// TestModelsFailureNotCached proves a failed fetch is not remembered: the
// replica answers 500, then 200, and the second request gets the list at
// once; a list over 1 MiB (but within maxModelsBytes) is a list.
func TestModelsFailureNotCached(t *testing.T) {
	m := newModelsReplica(t, modelsBody("a"))
	m.set(500, nil)
	h := &LLMRoute{}
	_, ok := h.replicaModels(context.Background(), m.target)
	assert.False(t, ok)
	m.set(200, nil)
	l, ok := h.replicaModels(context.Background(), m.target)
	require.True(t, ok, "a failure was cached")
	assert.Len(t, l, 1)

	ids := make([]string, 0, 40000)
	for i := range 40000 {
		ids = append(ids, fmt.Sprintf("model-%06d-%s", i, strings.Repeat("x", 32)))
	}
	big := modelsBody(ids...)
	require.Greater(t, len(big), 2<<20)
	mb := newModelsReplica(t, big)
	l, ok = h.replicaModels(context.Background(), mb.target)
	require.True(t, ok, "a valid list of %d bytes was dropped", len(big))
	assert.Len(t, l, len(ids))
}
