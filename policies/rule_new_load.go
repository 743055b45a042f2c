package policies

import "sync"

// byLoad: a new prefix's first request is a cold prefill wherever it goes,
// and its time to first token is set by the prefill queued ahead of it
// (Dynamo's uncached-prefill term), not by the requests decoding there.
// PendingPrefill is that queue as this router knows it, but bytes do not
// say how far the engine got with them: among the candidates whose
// pending prefill exceeds the least by no more than slack, the one this
// router chose least recently has had its queue longest, which is what
// round robin gets right. So traffic that shares nothing is placed as
// well as round robin places it, and the choice becomes the prefix's
// home. Ties go to the cooler one.
func (c *candidates) byLoad(slack int) int {
	rs, sent := c.replicas, c.mem.sent
	limit := rs[c.coolest].PendingPrefill + slack
	best, bestAt, bestRank := c.coolest, sent.last(rs[c.coolest].Addr), rs[c.coolest].rank(c.hk)
	for i := range rs {
		r := &rs[i]
		if i == c.coolest || !r.Free() || !c.bound.Admits(r) || r.PendingPrefill > limit {
			continue
		}
		at, sc := sent.last(r.Addr), r.rank(c.hk)
		if at < bestAt || (at == bestAt && cooler(r, sc, &rs[best], bestRank)) {
			best, bestAt, bestRank = i, at, sc
		}
	}
	return best
}

// dispatchOrder remembers, per replica address, when this router last
// chose it (a counter, not a clock).
type dispatchOrder struct {
	mu sync.Mutex
	n  uint64
	at map[string]uint64
}

func (d *dispatchOrder) last(addr string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.at[addr]
}

func (d *dispatchOrder) mark(addr string) { d.hold(addr) }

// hold marks addr as chosen now and returns a token for release.
func (d *dispatchOrder) hold(addr string) orderHold {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	if d.at == nil {
		d.at = map[string]uint64{}
	}
	h := orderHold{addr: addr, prev: d.at[addr], at: d.n}
	d.at[addr] = d.n
	return h
}

// release undoes a hold whose replica was not chosen after all, unless it
// was marked again since.
func (d *dispatchOrder) release(h orderHold) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.at[h.addr] == h.at {
		d.at[h.addr] = h.prev
	}
}

// orderHold is one hold's mark and what it replaced.
type orderHold struct {
	addr     string
	prev, at uint64
}
