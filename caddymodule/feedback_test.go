package caddymodule

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/llmroute/caddy-llmroute/policies"
)

// TestFeedbackCorrectsBelief proves that a believed prefix the engine did
// not have shrinks the index (the oldest beliefs go), that hits let it grow
// back, and that a run of misses on large predictions purges it.
func TestFeedbackCorrectsBelief(t *testing.T) {
	st := &replicaState{addr: "test-feedback", index: policies.NewIndex(1024)}
	for i := range 1024 {
		st.index.Insert([]uint64{uint64(i + 1)})
	}
	assert.Equal(t, "miss", st.observe(2, 128, 1000, 0, 250, 1024))
	assert.Equal(t, 896, st.index.Capacity(), "a miss shrinks the index by 1/8")
	assert.Equal(t, 896, st.index.Len())
	assert.Equal(t, "hit", st.observe(2, 128, 1000, 64, 250, 1024))
	assert.Equal(t, 910, st.index.Capacity(), "a hit grows it by capacity/64")
	assert.Equal(t, "cold", st.observe(0, 128, 1000, 0, 250, 1024))

	// Three misses in a row on predictions of >= 4 blocks: cache was wiped.
	for range 3 {
		st.observe(8, 128, 1000, 0, 250, 1024)
	}
	assert.Equal(t, 0, st.index.Len())
	fs := st.feedback.status()
	assert.Equal(t, "hits_collapsed", fs.LastPurge)
	assert.Equal(t, 1, fs.Hits)
	assert.Equal(t, 4, fs.Misses)
	assert.InDelta(t, 0.2, fs.Precision, 1e-9)
}
