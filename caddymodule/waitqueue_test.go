package caddymodule

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/admission"
)

// queueTest drives the policy's admission with tickets of given tenants
// and bands on one pool, without Caddy: each request selects on its own
// goroutine, as it would in reverse_proxy, and reports when it returns.
type queueTest struct {
	t    *testing.T
	p    *LLMSelection
	s    *selector
	pool reverseproxy.UpstreamPool
	// flow prefixes the tenants' names, so that tests do not share the
	// package-level queue's flows.
	flow string
	done chan selected
}

type selected struct {
	id   string
	addr string
	rc   *routeCtx
}

func newQueueTest(t *testing.T, maxInFlight, queueSize int, share float64) *queueTest {
	p := barePolicy(t, maxInFlight)
	p.QueueSize, p.SheddableShare = queueSize, share
	name := strings.ReplaceAll(t.Name(), "/", "-")
	return &queueTest{t: t, p: p, s: newSelector(t, p), pool: dynPool(name + ".invalid:8000"),
		flow: name + "-", done: make(chan selected, 64)}
}

// ticket returns a ticket of tenant (prefixed) in band costing cost tokens.
func (q *queueTest) ticket(tenant string, band admission.Priority, cost float64) *ticket {
	return &ticket{flow: q.flow + tenant, band: band, cost: cost, promptEst: cost}
}

// now selects for a request and expects it admitted at once.
func (q *queueTest) now(tk *ticket) *routeCtx {
	q.t.Helper()
	r, rc := routedRequest(q.t, context.Background())
	rc.tk = tk
	q.s.rcs = append(q.s.rcs, rc)
	up := q.p.Select(q.pool, r, nil)
	require.NotNil(q.t, up, "admitted at once")
	return rc
}

// queue selects for a request on its own goroutine and waits until it is
// counted in the queue (wantQueued after it), so that arrivals are
// ordered.
func (q *queueTest) queue(id string, tk *ticket, wantQueued int64) *routeCtx {
	q.t.Helper()
	r, rc := routedRequest(q.t, context.Background())
	rc.tk = tk
	q.s.rcs = append(q.s.rcs, rc)
	go func() {
		up := q.p.Select(q.pool, r, nil)
		addr := ""
		if up != nil {
			addr = up.Dial
		}
		q.done <- selected{id: id, addr: addr, rc: rc}
	}()
	waitFor(q.t, id+" queued", func() bool { return q.p.queued.Load() == wantQueued })
	return rc
}

// next returns the next request whose Select returned.
func (q *queueTest) next() selected {
	q.t.Helper()
	select {
	case s := <-q.done:
		return s
	case <-time.After(5 * time.Second):
		require.FailNow(q.t, "no request was admitted or refused")
	}
	return selected{}
}

// TestQueueOrderBandsThenTenants proves the order in which waiters are
// admitted as slots free one at a time: every critical one first (FIFO
// within its tenant), then the standard ones alternating between two
// tenants of equal weight whatever their arrival order, then the
// sheddable ones.
func TestQueueOrderBandsThenTenants(t *testing.T) {
	q := newQueueTest(t, 1, 16, 1)
	holder := q.now(q.ticket("hold", admission.Standard, 10))
	arrivals := []struct {
		id     string
		tenant string
		band   admission.Priority
	}{
		{"x1", "x", admission.Sheddable}, {"a1", "a", admission.Standard}, {"a2", "a", admission.Standard},
		{"a3", "a", admission.Standard}, {"c1", "c", admission.Critical}, {"b1", "b", admission.Standard},
		{"b2", "b", admission.Standard}, {"x2", "x", admission.Sheddable}, {"c2", "c", admission.Critical},
	}
	for i, a := range arrivals {
		q.queue(a.id, q.ticket(a.tenant, a.band, 10), int64(i+1))
	}
	holder.finish(succeeded)
	var order []string
	for range arrivals {
		s := q.next()
		require.NotEmpty(t, s.addr, "%s admitted", s.id)
		order = append(order, s.id)
		s.rc.finish(succeeded) // frees the slot for the next
	}
	assert.Equal(t, "c1 c2 a1 b1 a2 b2 a3 x1 x2", strings.Join(order, " "))
	assert.Zero(t, q.p.queued.Load())
}

// TestWeightedTenantsShareByWeight keeps two tenants backlogged, weights
// 3 and 1, and checks the admissions follow 3:1.
func TestWeightedTenantsShareByWeight(t *testing.T) {
	q := newQueueTest(t, 1, 64, 1)
	waiters.configure(q.flow+"heavy", admission.Flow{Weight: 3})
	waiters.configure(q.flow+"light", admission.Flow{Weight: 1})
	holder := q.now(q.ticket("hold", admission.Standard, 10))
	for i := range 16 {
		q.queue("h", q.ticket("heavy", admission.Standard, 100), int64(2*i+1))
		q.queue("l", q.ticket("light", admission.Standard, 100), int64(2*i+2))
	}
	holder.finish(succeeded)
	h, l := 0, 0
	for range 16 {
		s := q.next()
		if s.id == "h" {
			h++
		} else {
			l++
		}
		s.rc.finish(succeeded)
	}
	assert.Equal(t, 12, h, "heavy's share of the first 16 slots")
	assert.Equal(t, 4, l)
	for range 16 {
		q.next().rc.finish(succeeded)
	}
}

// TestFullQueueDisplacesNewestSheddable proves displacement: a standard or
// critical arrival at a full queue takes the place of the newest
// sheddable waiter (429, reason displaced); a sheddable arrival, or one
// that finds no sheddable waiter, is refused itself (queue_full); nothing
// admitted is touched.
func TestFullQueueDisplacesNewestSheddable(t *testing.T) {
	q := newQueueTest(t, 1, 2, 1)
	holder := q.now(q.ticket("hold", admission.Standard, 10))
	x1 := q.queue("x1", q.ticket("batch", admission.Sheddable, 10), 1)
	q.queue("x2", q.ticket("batch", admission.Sheddable, 10), 2)

	q.queue("s1", q.ticket("web", admission.Standard, 10), 2)
	s := q.next()
	assert.Equal(t, "x2", s.id, "the newest sheddable waiter lost its place")
	assert.Empty(t, s.addr)
	why, ra := s.rc.rejection()
	assert.Equal(t, rejectDisplaced, why)
	assert.Equal(t, time.Second, ra)

	r, rc := routedRequest(t, context.Background())
	rc.tk = q.ticket("batch", admission.Sheddable, 10)
	q.s.rcs = append(q.s.rcs, rc)
	assert.Nil(t, q.p.Select(q.pool, r, nil), "a sheddable arrival displaces nobody")
	why, _ = rc.rejection()
	assert.Equal(t, rejectQueueFull, why)

	q.queue("c1", q.ticket("vip", admission.Critical, 10), 2)
	s = q.next()
	assert.Equal(t, "x1", s.id)
	assert.Same(t, x1, s.rc)
	why, _ = s.rc.rejection()
	assert.Equal(t, rejectDisplaced, why)

	r, rc = routedRequest(t, context.Background())
	rc.tk = q.ticket("vip", admission.Critical, 10)
	q.s.rcs = append(q.s.rcs, rc)
	assert.Nil(t, q.p.Select(q.pool, r, nil), "no sheddable waiter left: a standard one is never displaced")
	why, _ = rc.rejection()
	assert.Equal(t, rejectQueueFull, why)

	assert.Equal(t, 1, q.p.state(q.pool[0].Dial).inFlightNow(), "the admitted request kept its slot")
	holder.finish(succeeded)
	s = q.next()
	assert.Equal(t, "c1", s.id)
	s.rc.finish(succeeded)
	s = q.next()
	assert.Equal(t, "s1", s.id)
	s.rc.finish(succeeded)
}

// TestTenantCapQueuesOnlyThatTenant proves max_in_flight per tenant: a
// tenant at its cap waits while another tenant is admitted past it at
// once, and its waiter goes when its own request ends.
func TestTenantCapQueuesOnlyThatTenant(t *testing.T) {
	q := newQueueTest(t, 4, 8, 1)
	waiters.configure(q.flow+"a", admission.Flow{Weight: 1, MaxInFlight: 1})
	a1 := q.now(q.ticket("a", admission.Standard, 10))
	q.queue("a2", q.ticket("a", admission.Standard, 10), 1)
	b1 := q.now(q.ticket("b", admission.Standard, 10))
	b2 := q.now(q.ticket("b", admission.Standard, 10))
	st, _ := waiters.q.Stats(q.flow + "a")
	assert.Equal(t, 1, st.InFlight)
	assert.Equal(t, 1, st.Queued)
	b1.finish(succeeded)
	select {
	case s := <-q.done:
		t.Fatalf("%s admitted while its tenant is at its cap", s.id)
	default:
	}
	a1.finish(succeeded)
	s := q.next()
	assert.Equal(t, "a2", s.id)
	assert.NotEmpty(t, s.addr)
	s.rc.finish(succeeded)
	b2.finish(succeeded)
	st, _ = waiters.q.Stats(q.flow + "a")
	assert.Equal(t, 0, st.InFlight, "every slot given back")
}

// TestSheddableShareKeepsHeadroom proves that sheddable requests take at
// most sheddable_share of the pool (here half of 4 slots), while standard
// ones fill it, and that a waiting sheddable request goes once the pool is
// back below the share.
func TestSheddableShareKeepsHeadroom(t *testing.T) {
	q := newQueueTest(t, 4, 8, 0.5)
	// Sheddable requests always pass through the queue: one at a time.
	var shed []*routeCtx
	for i := range 2 {
		q.queue("x", q.ticket("batch", admission.Sheddable, 10), 0)
		s := q.next()
		require.NotEmpty(t, s.addr, "sheddable %d within the share", i)
		shed = append(shed, s.rc)
	}
	q.queue("x3", q.ticket("batch", admission.Sheddable, 10), 1)
	s1 := q.now(q.ticket("web", admission.Standard, 10))
	s2 := q.now(q.ticket("web", admission.Standard, 10))
	assert.Equal(t, 4, q.p.state(q.pool[0].Dial).inFlightNow(), "standard traffic fills the pool")
	shed[0].finish(succeeded)
	s1.finish(succeeded)
	select {
	case s := <-q.done:
		t.Fatalf("%s admitted at 2 of 4 in flight", s.id)
	default:
	}
	s2.finish(succeeded)
	s := q.next()
	assert.Equal(t, "x3", s.id)
	assert.NotEmpty(t, s.addr, "1 of 4 in flight: room within the share")
	s.rc.finish(succeeded)
	shed[1].finish(succeeded)
}

// TestQueueTimeoutOnTheInjectedClock proves queue_timeout on the policy's
// clock: the waiter is refused (queue_timeout) when the clock passes it,
// and its place is given back.
func TestQueueTimeoutOnTheInjectedClock(t *testing.T) {
	q := newQueueTest(t, 1, 4, 1)
	clk := q.p.clock.(*clockwork.FakeClock)
	holder := q.now(q.ticket("hold", admission.Standard, 10))
	q.queue("w", q.ticket("a", admission.Standard, 10), 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, clk.BlockUntilContext(ctx, 1), "the waiter's timer")
	clk.Advance(time.Duration(q.p.QueueTimeout) - time.Millisecond)
	select {
	case s := <-q.done:
		t.Fatalf("%s left before its timeout", s.id)
	default:
	}
	clk.Advance(time.Millisecond)
	s := q.next()
	assert.Empty(t, s.addr)
	why, _ := s.rc.rejection()
	assert.Equal(t, rejectQueueWait, why)
	assert.Zero(t, q.p.queued.Load())
	assert.Zero(t, waiters.len())
	holder.finish(succeeded)
}

// TestSlotsAndChargesNeverLeak runs admissions, waits, refusals and
// finishes and checks that every tenant slot is given back and that the
// tenant's virtual time was charged once per admitted request.
func TestSlotsAndChargesNeverLeak(t *testing.T) {
	q := newQueueTest(t, 2, 4, 1)
	a := q.flow + "a"
	waiters.configure(a, admission.Flow{Weight: 2, MaxInFlight: 3})
	var rcs []*routeCtx
	for range 2 {
		rcs = append(rcs, q.now(q.ticket("a", admission.Standard, 10)))
	}
	for i := range 4 {
		q.queue("w", q.ticket("a", admission.Standard, 10), int64(i+1))
	}
	r, rc := routedRequest(t, context.Background())
	rc.tk = q.ticket("a", admission.Standard, 10)
	q.s.rcs = append(q.s.rcs, rc)
	assert.Nil(t, q.p.Select(q.pool, r, nil), "queue full")
	for _, rc := range rcs {
		rc.finish(succeeded)
	}
	for range 4 {
		q.next().rc.finish(succeeded)
	}
	st, _ := waiters.q.Stats(a)
	assert.Equal(t, 0, st.InFlight)
	assert.Equal(t, 0, st.Queued)
	// Two admitted at once (their charges forgotten when the first waiter
	// began a busy period), four from the queue: 10 tokens each, weight 2.
	assert.InDelta(t, 4*10/2.0, st.Counter, 1e-9, "charged once per request admitted from the queue")
	assert.Zero(t, q.p.state(q.pool[0].Dial).inFlightNow())
}
