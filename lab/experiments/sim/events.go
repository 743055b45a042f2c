package sim

import "time"

// Event kinds.
const (
	evArrival uint8 = iota + 1 // a session's first request arrives (a = session)
	evTurn                     // a later turn of session a (turn b) is sent
	evStepEnd                  // replica a's engine step ends
	evSample                   // router a scrapes the engines' metrics
	evRestart                  // replica a crash-restarts
)

// event is one scheduled happening. Events at the same time are handled in
// the order they were scheduled (seq), which keeps runs deterministic.
type event struct {
	t    time.Duration
	seq  uint64
	kind uint8
	a, b int
}

// eventQueue is a binary min-heap of events ordered by (t, seq).
type eventQueue struct {
	h   []event
	seq uint64
}

func (q *eventQueue) len() int { return len(q.h) }

func (q *eventQueue) less(i, j int) bool {
	a, b := &q.h[i], &q.h[j]
	return a.t < b.t || a.t == b.t && a.seq < b.seq
}

func (q *eventQueue) push(t time.Duration, kind uint8, a, b int) {
	q.seq++
	q.h = append(q.h, event{t: t, seq: q.seq, kind: kind, a: a, b: b})
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

func (q *eventQueue) pop() event {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	q.h = q.h[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && q.less(l, m) {
			m = l
		}
		if r < n && q.less(r, m) {
			m = r
		}
		if m == i {
			break
		}
		q.h[i], q.h[m] = q.h[m], q.h[i]
		i = m
	}
	return top
}
