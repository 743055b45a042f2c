package eventq

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// TestOrder proves events come out by time, and in scheduling order at
// equal times, whatever order they were pushed in.
func TestOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var q Queue[int]
	type ev struct {
		t time.Duration
		n int
	}
	var want []ev
	for n := range 2000 {
		e := ev{time.Duration(r.IntN(50)), n}
		want = append(want, e)
		q.Push(e.t, e.n)
	}
	sort.SliceStable(want, func(i, j int) bool { return want[i].t < want[j].t })
	if q.Len() != len(want) {
		t.Fatalf("Len = %d, want %d", q.Len(), len(want))
	}
	for i, w := range want {
		at, n := q.Pop()
		if at != w.t || n != w.n {
			t.Fatalf("pop %d = (%v, %d), want (%v, %d)", i, at, n, w.t, w.n)
		}
	}
	if q.Len() != 0 {
		t.Fatalf("%d events left", q.Len())
	}
}
