package policies

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sessionReplicas returns n free replicas with the given loads.
func sessionReplicas(loads ...int) []Replica {
	rs := make([]Replica, len(loads))
	for i, l := range loads {
		rs[i] = Replica{Addr: fmt.Sprintf("10.0.0.%d:8000", i+1), InFlight: l, Cap: 8, EngineWaiting: -1, EngineRunning: -1, KVUsage: -1}
	}
	return rs
}

// TestPickSession proves the session rule: home while free and within the
// load bound; otherwise the session key's rendezvous choice within the
// bound; -1 when nothing is free.
func TestPickSession(t *testing.T) {
	opts, err := Options{}.WithDefaults() // balance 1.5, slack 2
	require.NoError(t, err)
	const key = 0xfeedface
	newHome := PickSession(key, "", sessionReplicas(0, 0, 0, 0), opts)
	require.GreaterOrEqual(t, newHome, 0)
	for _, tt := range []struct {
		name  string
		home  int // index of the home replica, -1 new session
		loads []int
		setup func([]Replica)
		want  func(got int, rs []Replica)
	}{
		{"home within the bound", 2, []int{0, 1, 3, 0}, nil, func(got int, _ []Replica) { assert.Equal(t, 2, got) }},
		{"home busier than others but within the bound", 1, []int{1, 4, 1, 1}, nil, func(got int, _ []Replica) { assert.Equal(t, 1, got) }},
		{"home past the bound moves", 1, []int{0, 7, 0, 0}, nil, func(got int, _ []Replica) { assert.NotEqual(t, 1, got) }},
		{"home full moves", 0, []int{8, 0, 0, 0}, nil, func(got int, _ []Replica) { assert.NotEqual(t, 0, got) }},
		{"home cooling moves", 3, []int{0, 0, 0, 0}, func(rs []Replica) { rs[3].Unavailable = true }, func(got int, _ []Replica) { assert.NotEqual(t, 3, got) }},
		{"new session: rendezvous", -1, []int{0, 0, 0, 0}, nil, func(got int, _ []Replica) { assert.Equal(t, newHome, got) }},
		{"nothing free", 0, []int{8, 8, 8, 8}, nil, func(got int, _ []Replica) { assert.Equal(t, -1, got) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := sessionReplicas(tt.loads...)
			if tt.setup != nil {
				tt.setup(rs)
			}
			home := ""
			if tt.home >= 0 {
				home = rs[tt.home].Addr
			}
			got := PickSession(key, home, rs, opts)
			tt.want(got, rs)
			if got >= 0 {
				assert.True(t, rs[got].Free())
			}
		})
	}
}

// TestPickSessionAgreesAcrossInstances proves a new session's placement
// does not depend on the order replicas are listed in, nor on the
// instance: two routers seeing the same set pick the same replica, and
// sessions spread over the replicas.
func TestPickSessionAgreesAcrossInstances(t *testing.T) {
	opts, _ := Options{}.WithDefaults()
	rs := sessionReplicas(0, 0, 0, 0)
	rev := []Replica{rs[3], rs[2], rs[1], rs[0]}
	per := map[string]int{}
	for k := range uint64(400) {
		a, b := PickSession(k*0x9e3779b97f4a7c15, "", rs, opts), PickSession(k*0x9e3779b97f4a7c15, "", rev, opts)
		require.Equal(t, rs[a].Addr, rev[b].Addr, "session %d", k)
		per[rs[a].Addr]++
	}
	require.Len(t, per, 4)
	for addr, n := range per {
		assert.InDelta(t, 100, n, 40, "%s got %d of 400 sessions", addr, n)
	}
}

// TestLoadBound proves the bound's arithmetic.
func TestLoadBound(t *testing.T) {
	rs := sessionReplicas(2, 4, 0, 6)
	rs[3].Unavailable = true
	b := LoadBound(rs, 1.5, 2)
	assert.Equal(t, 3, b.N)
	assert.Equal(t, 0, b.MinLoad)
	assert.Equal(t, 6, b.Limit, "ceil(1.5 x 7 / 3) + 2")
	assert.Equal(t, 9, b.Widen(3, 2).Limit, "ceil(3 x 7 / 3) + 2")
	assert.True(t, b.Admits(&rs[0]), "load 2: 3 <= 6")
	rs[1].InFlight = 6
	assert.False(t, b.Admits(&rs[1]), "load 6: 7 > 6")
	assert.True(t, b.Admits(&rs[2]), "the least loaded is always within")
	assert.Zero(t, LoadBound(sessionReplicas(8, 8), 1.5, 2).N)
}
