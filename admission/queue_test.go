package admission

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// req is a waiting request in these tests.
type req struct {
	id   string
	pool string // which capacity it may use ("" any)
}

type push struct {
	flow string
	band Priority
	cost float64
	id   string
	pool string
}

// drain admits from q until nothing is eligible, at most max times, and
// returns the ids in admission order.
func drain(q *Queue[req], max int, ok func(*Entry[req]) bool) []string {
	var out []string
	for range max {
		e := q.Pick(ok)
		if e == nil {
			break
		}
		q.Admit(e)
		out = append(out, e.Value.id)
	}
	return out
}

// TestPickOrder is the queue's order as a table: bands strictly, then the
// lowest counter, then arrival; FIFO within a flow.
func TestPickOrder(t *testing.T) {
	cases := []struct {
		name   string
		flows  map[string]Flow
		pushes []push
		want   string
	}{
		{
			name:   "one flow is FIFO",
			pushes: []push{{"a", Standard, 10, "a1", ""}, {"a", Standard, 10, "a2", ""}, {"a", Standard, 10, "a3", ""}},
			want:   "a1 a2 a3",
		},
		{
			name: "bands are strict whatever the arrival order",
			pushes: []push{
				{"a", Sheddable, 10, "s1", ""}, {"a", Standard, 10, "n1", ""}, {"b", Critical, 10, "c1", ""},
				{"b", Sheddable, 10, "s2", ""}, {"a", Critical, 10, "c2", ""}, {"b", Standard, 10, "n2", ""},
			},
			want: "c1 c2 n1 n2 s1 s2",
		},
		{
			name: "two equal flows alternate, the earlier arrival first",
			pushes: []push{
				{"a", Standard, 10, "a1", ""}, {"a", Standard, 10, "a2", ""}, {"a", Standard, 10, "a3", ""},
				{"b", Standard, 10, "b1", ""}, {"b", Standard, 10, "b2", ""}, {"b", Standard, 10, "b3", ""},
			},
			want: "a1 b1 a2 b2 a3 b3",
		},
		{
			name:  "weight 3 to 1: three of a per one of b",
			flows: map[string]Flow{"a": {Weight: 3}, "b": {Weight: 1}},
			pushes: []push{
				{"a", Standard, 10, "a1", ""}, {"a", Standard, 10, "a2", ""}, {"a", Standard, 10, "a3", ""},
				{"a", Standard, 10, "a4", ""}, {"a", Standard, 10, "a5", ""}, {"a", Standard, 10, "a6", ""},
				{"b", Standard, 10, "b1", ""}, {"b", Standard, 10, "b2", ""},
			},
			// a's counter rises by 10/3 per request, b's by 10.
			want: "a1 b1 a2 a3 a4 b2 a5 a6",
		},
		{
			name: "fair over tokens, not requests: one large request of b per four small of a",
			pushes: []push{
				{"a", Standard, 10, "a1", ""}, {"a", Standard, 10, "a2", ""}, {"a", Standard, 10, "a3", ""},
				{"a", Standard, 10, "a4", ""}, {"a", Standard, 10, "a5", ""},
				{"b", Standard, 40, "b1", ""}, {"b", Standard, 40, "b2", ""},
			},
			want: "a1 b1 a2 a3 a4 a5 b2",
		},
		{
			name:  "a capped flow waits, the other is picked past it",
			flows: map[string]Flow{"a": {MaxInFlight: 1}},
			pushes: []push{
				{"a", Critical, 10, "a1", ""}, {"a", Critical, 10, "a2", ""}, {"b", Sheddable, 10, "b1", ""},
			},
			want: "a1 b1",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := NewQueue[req]()
			for n, f := range tc.flows {
				q.Configure(n, f)
			}
			for _, p := range tc.pushes {
				q.Push(p.flow, p.band, p.cost, false, req{id: p.id, pool: p.pool})
			}
			got := drain(q, 100, nil)
			assert.Equal(t, tc.want, strings.Join(got, " "))
		})
	}
}

// TestPickSkipsIneligible proves that a waiter that cannot use the
// capacity at hand is passed over for the next eligible one, in its flow
// too (FIFO among those that may use it), and that a claimed entry is not
// picked twice.
func TestPickSkipsIneligible(t *testing.T) {
	q := NewQueue[req]()
	q.Push("a", Standard, 10, false, req{"a1", "x"})
	q.Push("a", Standard, 10, false, req{"a2", "y"})
	q.Push("b", Standard, 10, false, req{"b1", "x"})
	onlyY := func(e *Entry[req]) bool { return e.Value.pool == "y" }
	e := q.Pick(onlyY)
	require.NotNil(t, e)
	assert.Equal(t, "a2", e.Value.id)
	q.Claim(e)
	assert.Nil(t, q.Pick(onlyY), "a claimed entry is not picked again")
	q.Unclaim(e)
	assert.Equal(t, "a2", q.Pick(onlyY).Value.id, "an unclaimed entry waits where it was")
	assert.Equal(t, "a1", q.Pick(nil).Value.id)
}

// TestIdleFlowIsLifted proves that a flow that was served little and then
// idle does not bank credit: when it waits again it starts at the lowest
// counter among the waiting flows, so it alternates with a busy flow
// instead of taking every slot until it caught up.
func TestIdleFlowIsLifted(t *testing.T) {
	q := NewQueue[req]()
	for i := range 20 {
		q.Push("busy", Standard, 10, false, req{id: fmt.Sprintf("busy%d", i)})
	}
	// busy is served 10 times alone: its counter reaches 100.
	require.Len(t, drain(q, 10, nil), 10)
	st, _ := q.Stats("busy")
	assert.Equal(t, 100.0, st.Counter)
	for i := range 3 {
		q.Push("quiet", Standard, 10, false, req{id: fmt.Sprintf("quiet%d", i)})
	}
	qs, _ := q.Stats("quiet")
	assert.Equal(t, 100.0, qs.Counter, "lifted to the busy flow's counter")
	got := drain(q, 6, nil)
	assert.Equal(t, "busy10 quiet0 busy11 quiet1 busy12 quiet2", strings.Join(got, " "))
}

// TestWeightedShareOverLongRun holds two flows backlogged with weights 3
// and 1 and checks the admitted counts stay within one request of 3:1 at
// every point.
func TestWeightedShareOverLongRun(t *testing.T) {
	q := NewQueue[req]()
	q.Configure("heavy", Flow{Weight: 3})
	q.Configure("light", Flow{Weight: 1})
	for i := range 400 {
		q.Push("heavy", Standard, 100, false, req{id: "h"})
		if i < 200 {
			q.Push("light", Standard, 100, false, req{id: "l"})
		}
	}
	h, l := 0, 0
	for i := range 400 {
		e := q.Pick(nil)
		require.NotNil(t, e)
		q.Admit(e)
		if e.Value.id == "h" {
			h++
		} else {
			l++
		}
		assert.InDelta(t, 3*float64(l), float64(h), 3.01, "after %d picks: %d heavy, %d light", i+1, h, l)
	}
	assert.Equal(t, 300, h)
	assert.Equal(t, 100, l)
}

// TestSettleCorrectsTheCounter proves that an admitted request that cost
// more than its estimate pays for it at its flow's next turn.
func TestSettleCorrectsTheCounter(t *testing.T) {
	q := NewQueue[req]()
	q.Push("a", Standard, 10, false, req{id: "a1"})
	q.Push("a", Standard, 10, false, req{id: "a2"})
	q.Push("b", Standard, 10, false, req{id: "b1"})
	q.Push("b", Standard, 10, false, req{id: "b2"})
	q.Push("b", Standard, 10, false, req{id: "b3"})
	assert.Equal(t, "a1", drain(q, 1, nil)[0])
	q.Settle("a", 90) // a1 used 100 tokens, not 10
	got := drain(q, 4, nil)
	assert.Equal(t, "b1 b2 b3 a2", strings.Join(got, " "))
}

// TestCapsAndSlots proves the in-flight cap: Acquire past it fails, a
// claim holds a slot that Unclaim gives back, a held entry (a retry)
// neither needs nor takes a slot, and Release frees one.
func TestCapsAndSlots(t *testing.T) {
	q := NewQueue[req]()
	q.Configure("a", Flow{MaxInFlight: 2})
	require.True(t, q.Acquire("a"))
	e := q.Push("a", Standard, 1, false, req{id: "a2"})
	q.Claim(e)
	assert.False(t, q.Acquire("a"), "the claim holds the second slot")
	q.Unclaim(e)
	require.True(t, q.Acquire("a"))
	assert.Nil(t, q.Pick(nil), "the flow is at its cap")
	r := q.Push("a", Standard, 1, true, req{id: "retry"})
	assert.Equal(t, r, q.Pick(nil), "a retry holds its slot already")
	q.Admit(r)
	st, _ := q.Stats("a")
	assert.Equal(t, 2, st.InFlight)
	q.Release("a")
	assert.Equal(t, e, q.Pick(nil))
	q.Admit(e)
	q.Release("a")
	q.Release("a")
	st, _ = q.Stats("a")
	assert.Equal(t, 0, st.InFlight)
	assert.Equal(t, 0, q.Len())
	q.Release("a")
	st, _ = q.Stats("a")
	assert.Equal(t, 0, st.InFlight, "never below zero")
}

// TestVictimByPriority proves priority displacement: only an arrival
// above the sheddable band displaces by priority, only a sheddable waiter,
// the newest across flows, never a claimed one.
func TestVictimByPriority(t *testing.T) {
	q := NewQueue[req]()
	q.Push("a", Sheddable, 1, false, req{id: "s1"})
	s2 := q.Push("b", Sheddable, 1, false, req{id: "s2"})
	q.Push("a", Standard, 1, false, req{id: "n1"})
	s3 := q.Push("a", Sheddable, 1, false, req{id: "s3"})
	shed := q.Push("b", Sheddable, 1, false, req{id: "arrival"})
	assert.Equal(t, s3, q.Victim(shed, nil), "not by priority, but by fairness: a holds 3 places against b's 2")
	q.Remove(shed)
	std := q.Push("c", Standard, 1, false, req{id: "std"})
	assert.Equal(t, s3, q.Victim(std, nil))
	q.Claim(s3)
	assert.Equal(t, s2, q.Victim(std, nil), "a claimed waiter is being admitted: not a victim")
	q.Remove(s3)
	q.Remove(s2)
	assert.Equal(t, "s1", q.Victim(std, nil).Value.id)
	assert.Nil(t, q.Victim(std, func(e *Entry[req]) bool { return false }))
	assert.Equal(t, 3, q.Len())
}

// TestVictimByFairness proves fairness displacement within a band: the
// flow holding the most places per unit of weight gives up its newest
// waiter to an arrival of a flow with fewer, until the places are shared
// by weight; never a waiter of a higher band than the arrival's.
func TestVictimByFairness(t *testing.T) {
	q := NewQueue[req]()
	q.Configure("heavy", Flow{Weight: 2})
	var noisy []*Entry[req]
	for i := range 6 {
		noisy = append(noisy, q.Push("noisy", Standard, 1, false, req{id: fmt.Sprintf("n%d", i)}))
	}
	crit := q.Push("noisy", Critical, 1, false, req{id: "nc"})
	quiet := q.Push("quiet", Standard, 1, false, req{id: "q1"})
	assert.Equal(t, noisy[5], q.Victim(quiet, nil), "noisy holds 7 places, quiet 1: noisy's newest standard waiter")
	q.Remove(noisy[5])
	shed := q.Push("quiet", Sheddable, 1, false, req{id: "q2"})
	assert.Nil(t, q.Victim(shed, nil), "noisy has no waiter in the sheddable band: a sheddable arrival takes no higher place")
	q.Remove(shed)
	assert.NotEqual(t, crit, q.Victim(quiet, nil))

	// Equal shares reached: 6 places each side after the swaps, none more.
	q2 := NewQueue[req]()
	for range 3 {
		q2.Push("a", Standard, 1, false, req{id: "a"})
	}
	b1 := q2.Push("b", Standard, 1, false, req{id: "b"})
	v := q2.Victim(b1, nil)
	require.NotNil(t, v, "a: 3 places, b: 1")
	q2.Remove(v)
	b2 := q2.Push("b", Standard, 1, false, req{id: "b"})
	assert.Nil(t, q2.Victim(b2, nil), "a would keep 1 against b's 2")
	// Weights: heavy (2) may hold twice the places of light (1).
	q3 := NewQueue[req]()
	q3.Configure("heavy", Flow{Weight: 2})
	for range 4 {
		q3.Push("light", Standard, 1, false, req{id: "l"})
	}
	h := q3.Push("heavy", Standard, 1, false, req{id: "h"})
	for i := 2; ; i++ {
		v := q3.Victim(h, nil)
		if v == nil {
			st, _ := q3.Stats("light")
			hs, _ := q3.Stats("heavy")
			assert.Equal(t, 2, st.Queued, "light keeps 2 places")
			assert.Equal(t, 3, hs.Queued, "heavy took 2 of light's: one more would leave light 1 against heavy's 2 per weight")
			break
		}
		q3.Remove(v)
		require.Less(t, i, 10)
		h = q3.Push("heavy", Standard, 1, false, req{id: "h"})
	}
}

// TestPriorityParseAndLower covers the band names and the lowering rule.
func TestPriorityParseAndLower(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Priority
		ok   bool
	}{{"critical", Critical, true}, {" Standard ", Standard, true}, {"SHEDDABLE", Sheddable, true}, {"urgent", Standard, false}, {"", Standard, false}} {
		got, ok := ParsePriority(tc.in)
		assert.Equal(t, tc.ok, ok, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
		if ok {
			assert.Equal(t, strings.ToLower(strings.TrimSpace(tc.in)), got.String())
		}
	}
	assert.Equal(t, Standard, Standard.Lower(Critical), "never above the ceiling")
	assert.Equal(t, Sheddable, Standard.Lower(Sheddable))
	assert.Equal(t, Critical, Critical.Lower(Critical))
	assert.Equal(t, Sheddable, Sheddable.Lower(Critical))
}
