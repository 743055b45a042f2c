package admission

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBusyPeriodStartsEven is a table of what counters a flow carries into
// contention. Each case charges some flows for service they received
// without waiting (admitted at once, as Acquire and Charge do while the
// queue is empty), then pushes waiters in order and drains the queue: the
// order shows whose counter counted. The case: a tenant that used
// 4,500 tokens while nobody waited must not queue behind a whole flood
// that starts waiting first.
func TestBusyPeriodStartsEven(t *testing.T) {
	type charge struct {
		flow string
		cost float64
	}
	cases := []struct {
		name    string
		charged []charge
		pushes  []push
		want    string
	}{
		{
			name:    "uncontended use is no debt",
			charged: []charge{{"alice", 4500}},
			pushes: []push{
				{flow: "flood", cost: 450, id: "f1"}, {flow: "flood", cost: 450, id: "f2"},
				{flow: "flood", cost: 450, id: "f3"}, {flow: "flood", cost: 450, id: "f4"},
				{flow: "alice", cost: 450, id: "a1"},
			},
			want: "f1 a1 f2 f3 f4",
		},
		{
			name:    "uncontended use is no credit either",
			charged: []charge{{"flood", 4500}},
			pushes: []push{
				{flow: "alice", cost: 450, id: "a1"}, {flow: "alice", cost: 450, id: "a2"},
				{flow: "flood", cost: 450, id: "f1"}, {flow: "flood", cost: 450, id: "f2"},
			},
			want: "a1 f1 a2 f2",
		},
		{
			name:    "an inflated counter is forgotten",
			charged: []charge{{"alice", 4.6e18}},
			pushes: []push{
				{flow: "bob", cost: 10, id: "b1"}, {flow: "bob", cost: 10, id: "b2"},
				{flow: "alice", cost: 10, id: "a1"},
			},
			want: "b1 a1 b2",
		},
		{
			name:    "weights still count within the period",
			charged: []charge{{"light", 1000}},
			pushes: []push{
				{flow: "heavy", cost: 100, id: "h1"}, {flow: "heavy", cost: 100, id: "h2"},
				{flow: "heavy", cost: 100, id: "h3"}, {flow: "light", cost: 100, id: "l1"},
				{flow: "light", cost: 100, id: "l2"},
			},
			want: "h1 l1 h2 h3 l2",
		},
	}
	checked := 0
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			q := NewQueue[req]()
			q.Configure("heavy", Flow{Weight: 2})
			for _, ch := range c.charged {
				require.True(t, q.Acquire(ch.flow))
				q.Charge(ch.flow, ch.cost)
				q.Release(ch.flow)
			}
			for _, p := range c.pushes {
				q.Push(p.flow, Standard, p.cost, false, req{id: p.id})
			}
			got := drain(q, len(c.pushes)+1, nil)
			assert.Equal(t, c.want, strings.Join(got, " "))
			checked++
		})
	}
	assert.Equal(t, len(cases), checked)
}

// TestContendedDebtIsKept proves the busy-period restart forgives nothing
// while flows compete: a flow whose request cost far more than its
// estimate, settled while the other still waits, pays for it when it
// waits again, and the counters a faulty charge would make non-finite are
// refused.
func TestContendedDebtIsKept(t *testing.T) {
	q := NewQueue[req]()
	q.Push("a", Standard, 10, false, req{id: "a1"})
	for i := range 4 {
		q.Push("b", Standard, 10, false, req{id: fmt.Sprintf("b%d", i+1)})
	}
	require.Equal(t, []string{"a1"}, drain(q, 1, nil))
	q.Settle("a", 30) // a1 cost 40, not 10
	q.Settle("a", math.Inf(1))
	q.Settle("a", math.NaN())
	q.Charge("a", math.Inf(1))
	q.Push("a", Standard, 10, false, req{id: "a2"})
	assert.Equal(t, "b1 b2 b3 b4 a2", strings.Join(drain(q, 6, nil), " "))
	st, _ := q.Stats("a")
	assert.Equal(t, 50.0, st.Counter)
}

// TestResetFlow proves an operator's reset: the flow's counter starts at
// the lowest of the others waiting, or at zero.
func TestResetFlow(t *testing.T) {
	q := NewQueue[req]()
	q.Push("b", Standard, 10, false, req{id: "b1"})
	q.Push("b", Standard, 10, false, req{id: "b2"})
	q.Push("a", Standard, 10, false, req{id: "a1"})
	require.Equal(t, []string{"b1"}, drain(q, 1, nil)) // b at 10
	q.Settle("a", 1e12)
	q.Reset("a")
	st, _ := q.Stats("a")
	assert.Equal(t, 10.0, st.Counter, "the lowest counter of the others waiting")
	q.Reset("b")
	st, _ = q.Stats("b")
	assert.Equal(t, 10.0, st.Counter)
	drain(q, 2, nil)
	q.Reset("a")
	st, _ = q.Stats("a")
	assert.Zero(t, st.Counter, "nobody waits: zero")
}
