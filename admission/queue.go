package admission

import "math"

// Queue orders the requests that wait for capacity: strict priority bands
// first; within a band, fair across flows (tenants) by weight; within a
// flow, first come first served. It also keeps each flow's in-flight count
// against its optional cap, so that a flow at its cap waits without
// holding up the others.
//
// Fairness is virtual time over tokens: each flow has a counter of the
// service it received, in estimated tokens divided by its weight, and the
// next request comes from the flow with the lowest counter (ties to the
// earliest arrival). A flow that was idle and starts waiting again has its
// counter lifted to the lowest counter of the flows already waiting, so
// that idle time is not banked as credit to burst with later. This is the
// Virtual Token Counter of Sheng et al., "Fairness in Serving Large
// Language Models" (OSDI 2024), the rule AIBrix uses. Over any period in
// which two flows both wait, the tokens they are admitted for differ, per
// unit of weight, by at most about one request's cost.
//
// Counters compare service received while flows compete. When a request
// finds nobody waiting, a busy period begins: every counter starts again
// at zero, so service a flow received while nobody else waited (admitted
// at once, without contention) is neither credit nor debt against the
// flows that start waiting with it. (The paper lifts a newcomer to the
// counter of the last flow to leave the queue; a flow admitted without
// waiting never entered it, and would keep a debt from uncontended use.)
// This also bounds how far a counter can drift: a counter that a
// mistaken charge inflated is forgotten at the next busy period.
//
// Why not deficit round robin. Both bound the unfairness by one request's
// cost, but an LLM request's cost is only an estimate at admission (the
// prompt, and a guess at the output) and is known when it ends, often
// minutes later. A counter takes the estimate at admission and the
// correction at the end (Settle) wherever the flow stands; DRR spends a
// deficit at dequeue time and resets it when the flow goes idle, which is
// exactly when most corrections arrive, so they would be lost. And a freed
// slot can only go to a waiter that may use it (its replicas, its flow's
// cap): "the lowest counter among the eligible" needs no round-robin
// pointer to repair when a flow's turn is skipped. The price is a scan of
// the waiting flows per pick (O(flows), and flows are configured tenants,
// a handful), against DRR's O(1).
//
// A Queue is not safe for concurrent use; the caller locks.
type Queue[T any] struct {
	// Internal data
	flows map[string]*flow[T]
	order []*flow[T] // in creation order, so that every scan is deterministic
	seq   uint64
	n     int
}

// Flow is one flow's configuration.
type Flow struct {
	// Weight is the flow's share of contended capacity, relative to the
	// other flows' weights. Zero or less means 1.
	Weight float64
	// MaxInFlight caps the flow's admitted requests (admitted and not yet
	// released); 0 means no cap. A flow at its cap waits; the others are
	// picked past it.
	MaxInFlight int
}

// FlowStats is what a flow holds now.
type FlowStats struct {
	Flow
	// InFlight counts admitted requests not yet released (and waiters
	// claimed for an attempt).
	InFlight int
	// Queued counts waiting requests.
	Queued int
	// Counter is the flow's virtual time: tokens admitted per unit of weight.
	Counter float64
}

// MinCost is the least cost a request is charged, so that requests
// without a prompt (GET /v1/models) still take their turn.
const MinCost = 1.0

type flow[T any] struct {
	name     string
	cfg      Flow
	inFlight int
	counter  float64
	waiting  [NumPriorities]entryList[T]
	queued   int
}

func (f *flow[T]) weight() float64 {
	if f.cfg.Weight > 0 {
		return f.cfg.Weight
	}
	return 1
}

func (f *flow[T]) capped() bool { return f.cfg.MaxInFlight > 0 && f.inFlight >= f.cfg.MaxInFlight }

// Entry is one waiting request, from Push until Admit or Remove.
type Entry[T any] struct {
	// Value is the caller's.
	Value T

	flow    *flow[T]
	band    Priority
	cost    float64
	held    bool
	claimed bool
	linked  bool
	seq     uint64

	prev, next *Entry[T]
}

// Band returns the entry's priority band.
func (e *Entry[T]) Band() Priority { return e.band }

// Flow returns the name of the entry's flow.
func (e *Entry[T]) Flow() string { return e.flow.name }

// entryList is a FIFO of entries.
type entryList[T any] struct {
	head, tail *Entry[T]
}

func (l *entryList[T]) push(e *Entry[T]) {
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
}

func (l *entryList[T]) remove(e *Entry[T]) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = nil, nil
}

// NewQueue returns an empty queue.
func NewQueue[T any]() *Queue[T] {
	return &Queue[T]{flows: map[string]*flow[T]{}}
}

// flowOf returns the named flow, created with the defaults (weight 1, no
// cap) the first time it is named.
func (q *Queue[T]) flowOf(name string) *flow[T] {
	if f, ok := q.flows[name]; ok {
		return f
	}
	f := &flow[T]{name: name}
	q.flows[name] = f
	q.order = append(q.order, f)
	return f
}

// Configure sets a flow's weight and cap. It takes effect at once: for the
// next pick, the next charge and the next Acquire; requests already
// admitted stay admitted under a lowered cap.
func (q *Queue[T]) Configure(name string, cfg Flow) { q.flowOf(name).cfg = cfg }

// Len returns the number of waiting requests.
func (q *Queue[T]) Len() int { return q.n }

// Push adds a request of flow name to the back of its band with the given
// estimated cost (in tokens). held says the request was admitted before
// and waits again (a retry after its attempt failed): it holds its flow's
// slot already and was charged, so it is neither capped nor charged again.
func (q *Queue[T]) Push(name string, band Priority, cost float64, held bool, v T) *Entry[T] {
	f := q.flowOf(name)
	switch {
	case q.n == 0:
		q.startBusyPeriod()
	case f.queued == 0:
		// Waiting again after an idle spell: no banked credit.
		if m, ok := q.minWaiting(); ok && f.counter < m {
			f.counter = m
		}
	}
	if band < Sheddable || band > Critical {
		band = Standard
	}
	q.seq++
	e := &Entry[T]{Value: v, flow: f, band: band, cost: max(cost, MinCost), held: held, seq: q.seq, linked: true}
	f.waiting[band].push(e)
	f.queued++
	q.n++
	return e
}

// startBusyPeriod starts every flow's counter again at zero: nobody
// waits, so no flow is ahead of another.
func (q *Queue[T]) startBusyPeriod() {
	for _, f := range q.order {
		f.counter = 0
	}
}

// minWaiting returns the lowest counter among flows with waiting requests.
func (q *Queue[T]) minWaiting() (float64, bool) {
	m, ok := 0.0, false
	for _, f := range q.order {
		if f.queued > 0 && (!ok || f.counter < m) {
			m, ok = f.counter, true
		}
	}
	return m, ok
}

// Pick returns the waiting request to admit next among those eligible
// (nil when none is): the highest band that has one; in it, the flow with
// the lowest counter (ties to the earliest arrival); in that flow, the
// earliest. An entry is eligible when it is not claimed, its flow is below
// its cap (or the entry holds its slot already) and ok accepts it (the
// caller's test: may it use the capacity at hand). Pick changes nothing.
func (q *Queue[T]) Pick(ok func(*Entry[T]) bool) *Entry[T] {
	for b := Critical; b >= Sheddable; b-- {
		var best *Entry[T]
		for _, f := range q.order {
			if best != nil && f.counter > best.flow.counter {
				continue // cannot beat best
			}
			capped := f.capped()
			for e := f.waiting[b].head; e != nil; e = e.next {
				if e.claimed || (capped && !e.held) || (ok != nil && !ok(e)) {
					continue
				}
				if best == nil || f.counter < best.flow.counter || (f.counter == best.flow.counter && e.seq < best.seq) {
					best = e
				}
				break // FIFO within a flow: only its first eligible entry competes
			}
		}
		if best != nil {
			return best
		}
	}
	return nil
}

// Claim reserves e's flow slot while the caller attempts to admit it, so
// that no other admission takes that slot meanwhile; Unclaim gives it back
// if the attempt fails. A claimed entry is not picked.
func (q *Queue[T]) Claim(e *Entry[T]) {
	if e.claimed || !e.linked {
		return
	}
	e.claimed = true
	if !e.held {
		e.flow.inFlight++
	}
}

// Unclaim undoes Claim: the entry waits on where it was.
func (q *Queue[T]) Unclaim(e *Entry[T]) {
	if !e.claimed {
		return
	}
	e.claimed = false
	if !e.held {
		e.flow.inFlight--
	}
}

// Admit takes e out of the queue as admitted: it holds its flow's slot
// until Release, and its flow is charged its cost (unless it was admitted
// before: held).
func (q *Queue[T]) Admit(e *Entry[T]) {
	if !e.linked {
		return
	}
	if !e.claimed && !e.held {
		e.flow.inFlight++
	}
	e.claimed = false
	q.unlink(e)
	if !e.held {
		e.flow.counter += e.cost / e.flow.weight()
	}
}

// Remove takes e out of the queue unadmitted (it timed out, its client
// left, it was refused or displaced); a claim on it is given back.
func (q *Queue[T]) Remove(e *Entry[T]) {
	if !e.linked {
		return
	}
	q.Unclaim(e)
	q.unlink(e)
}

func (q *Queue[T]) unlink(e *Entry[T]) {
	e.flow.waiting[e.band].remove(e)
	e.linked = false
	e.flow.queued--
	q.n--
}

// Acquire takes a slot of flow name for a request admitted without
// waiting, false when the flow is at its cap. Charge it once it is
// admitted, Release it when it ends (or when it could not be admitted).
func (q *Queue[T]) Acquire(name string) bool {
	f := q.flowOf(name)
	if f.capped() {
		return false
	}
	f.inFlight++
	return true
}

// Charge adds an admitted request's cost to its flow's counter.
func (q *Queue[T]) Charge(name string, cost float64) {
	if !finite(cost) {
		return
	}
	f := q.flowOf(name)
	f.counter += max(cost, MinCost) / f.weight()
}

// Settle corrects a flow's counter by delta tokens: what an admitted
// request turned out to cost minus what it was charged (negative when it
// cost less). The correction lands wherever the flow stands, waiting or
// not, so a flow that under-estimates pays for it at its next turn.
func (q *Queue[T]) Settle(name string, delta float64) {
	if !finite(delta) {
		return // a cost no request can have: the counter keeps its meaning
	}
	f := q.flowOf(name)
	f.counter += delta / f.weight()
}

// Reset starts flow name's counter afresh (an operator's remedy for a
// counter inflated by a faulty charge): at the lowest counter of the
// other flows waiting, as if it began to wait now, or at zero when none
// waits.
func (q *Queue[T]) Reset(name string) {
	f := q.flowOf(name)
	m, ok := 0.0, false
	for _, g := range q.order {
		if g != f && g.queued > 0 && (!ok || g.counter < m) {
			m, ok = g.counter, true
		}
	}
	f.counter = m
}

// finite reports whether v is a number a counter may take.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Release gives back the slot an admitted request held.
func (q *Queue[T]) Release(name string) {
	f := q.flowOf(name)
	if f.inFlight > 0 {
		f.inFlight--
	}
}

// Victim returns the waiter to displace so that arrival, which is queued
// already and found no room, may keep its place in a full queue; nil when
// none may be displaced (then the arrival itself is refused). Only
// waiters are ever displaced, never an admitted request, and only those
// that are not claimed and that ok accepts (the caller's: those that
// count against the same bound):
//
//   - priority: an arrival above the sheddable band displaces the newest
//     sheddable waiter, of any flow;
//   - fairness: otherwise, the flow holding the most places per unit of
//     weight gives up its newest waiter in a band no higher than the
//     arrival's, if it would still hold at least as many places per unit
//     of weight as the arrival's flow. So a flooding tenant cannot keep
//     the others out of the queue by filling it: under pressure the
//     places are shared by weight, as the admissions are.
//
// The newest, because it has waited least and the older ones are closest
// to their turn.
func (q *Queue[T]) Victim(arrival *Entry[T], ok func(*Entry[T]) bool) *Entry[T] {
	usable := func(e *Entry[T]) bool { return e != arrival && !e.claimed && (ok == nil || ok(e)) }
	if arrival.band > Sheddable {
		if v := q.newest(Sheddable, Sheddable, nil, usable); v != nil {
			return v
		}
	}
	f := arrival.flow
	var over *flow[T]
	for _, g := range q.order {
		if g == f || g.queued == 0 {
			continue
		}
		if over == nil || float64(g.queued)/g.weight() > float64(over.queued)/over.weight() {
			over = g
		}
	}
	if over == nil || float64(over.queued-1)/over.weight() < float64(f.queued)/f.weight() {
		return nil
	}
	return q.newest(Sheddable, arrival.band, over, usable)
}

// newest returns the newest usable entry in bands lo..hi, of flow only
// when it is not nil, preferring the lowest band.
func (q *Queue[T]) newest(lo, hi Priority, only *flow[T], usable func(*Entry[T]) bool) *Entry[T] {
	for b := lo; b <= hi; b++ {
		var v *Entry[T]
		for _, f := range q.order {
			if only != nil && f != only {
				continue
			}
			for e := f.waiting[b].tail; e != nil; e = e.prev {
				if v != nil && e.seq < v.seq {
					break
				}
				if usable(e) {
					v = e
					break
				}
			}
		}
		if v != nil {
			return v
		}
	}
	return nil
}

// Stats returns what flow name holds now; false if it was never named.
func (q *Queue[T]) Stats(name string) (FlowStats, bool) {
	f, ok := q.flows[name]
	if !ok {
		return FlowStats{}, false
	}
	return FlowStats{Flow: f.cfg, InFlight: f.inFlight, Queued: f.queued, Counter: f.counter}, true
}

// Flows returns the names of every flow named so far, in the order they
// were first named.
func (q *Queue[T]) Flows() []string {
	out := make([]string, len(q.order))
	for i, f := range q.order {
		out[i] = f.name
	}
	return out
}
