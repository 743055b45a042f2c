// Package eventq is the event queue of the lab's discrete-event
// simulators (sim, tenancy): a binary min-heap ordered by time, events at
// the same time in the order they were scheduled, which keeps runs
// deterministic.
package eventq

import "time"

type item[T any] struct {
	t   time.Duration
	seq uint64
	v   T
}

// Queue holds events of type T. The zero value is empty and ready.
type Queue[T any] struct {
	h   []item[T]
	seq uint64
}

// Len returns the number of events scheduled.
func (q *Queue[T]) Len() int { return len(q.h) }

func (q *Queue[T]) less(i, j int) bool {
	a, b := &q.h[i], &q.h[j]
	return a.t < b.t || a.t == b.t && a.seq < b.seq
}

// Push schedules v at time t.
func (q *Queue[T]) Push(t time.Duration, v T) {
	q.seq++
	q.h = append(q.h, item[T]{t: t, seq: q.seq, v: v})
	for i := len(q.h) - 1; i > 0; {
		p := (i - 1) / 2
		if !q.less(i, p) {
			break
		}
		q.h[i], q.h[p] = q.h[p], q.h[i]
		i = p
	}
}

// Pop removes the earliest event and returns its time and itself; the
// queue must not be empty.
func (q *Queue[T]) Pop() (time.Duration, T) {
	top := q.h[0]
	n := len(q.h) - 1
	q.h[0] = q.h[n]
	var zero item[T]
	q.h[n] = zero // no reference kept past the heap's end
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
	return top.t, top.v
}
