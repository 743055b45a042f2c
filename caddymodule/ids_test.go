package caddymodule

import (
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// liveHeap returns the live heap after a full collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestLongStateIDsCostNoHeap records 400 follow-ups whose conversation
// and response ids are 1 MiB each, as the router does after a success,
// and measures the live heap they leave behind: the tables keep a hash of
// each id, not the id, so the growth stays under a megabyte where keeping
// the ids kept hundreds. The follow-ups are found again by their whole
// ids, and ids that differ only past their first megabyte are apart.
func TestLongStateIDsCostNoHeap(t *testing.T) {
	stateHomes.Purge()
	t.Cleanup(stateHomes.Purge)
	const n, size = 400, 1 << 20
	id := func(kind string, i int) string {
		return kind + strings.Repeat("x", size) + strconv.Itoa(i) // equal but for their end
	}
	before := liveHeap()
	for i := range n {
		req := &policies.Request{Endpoint: policies.EndpointResponses, Conversation: id("conv_", i)}
		recordState("10.0.0."+strconv.Itoa(i%4)+":8000", id("resp_", i), req)
	}
	grown := int64(liveHeap()) - int64(before)
	t.Logf("live heap after %d follow-ups with 1 MiB ids: %+d bytes (%.2f MiB)", n, grown, float64(grown)/(1<<20))
	assert.Less(t, grown, int64(1<<20), "the tables hold the ids themselves")
	require.Equal(t, 2*n, stateHomes.Len())
	found := 0
	for i := range n {
		a, k := stateHome(&policies.Request{PreviousResponseID: id("resp_", i)})
		assert.Equal(t, "10.0.0."+strconv.Itoa(i%4)+":8000", a)
		assert.NotZero(t, k)
		a, _ = stateHome(&policies.Request{Conversation: id("conv_", i)})
		assert.Equal(t, "10.0.0."+strconv.Itoa(i%4)+":8000", a)
		found++
	}
	assert.Equal(t, n, found)
	a, _ := stateHome(&policies.Request{PreviousResponseID: id("conv_", 0)})
	assert.Empty(t, a, "a response and a conversation of one id are apart")
}

// TestLongSessionIDsHashedWhole proves session ids are keyed whole: two
// that are equal in their first kilobyte but differ after are two
// sessions, while {llm.session} shows a bounded prefix.
func TestLongSessionIDsHashedWhole(t *testing.T) {
	h := &LLMRoute{}
	long := strings.Repeat("s", 1024)
	keys := map[uint64]bool{}
	for _, suffix := range []string{"-a", "-b", "-c"} {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		r.Header.Set("X-Session-Id", long+suffix)
		rc := newRouteCtx(time.Now(), &policies.Request{Model: "m"}, nil)
		h.describe(r, rc)
		assert.Len(t, rc.session, maxSessionID)
		keys[rc.sessionKey] = true
	}
	assert.Len(t, keys, 3, "sessions equal in their first bytes collided")
}
