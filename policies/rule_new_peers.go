package policies

import (
	"sync"
	"sync/atomic"
)

// nearRendezvous: with peers and no shared Directory, routers that each
// place new prefixes by their own load would scatter a shared prompt
// (SGLang's gateway lost follow-up hits from 0.94 to 0.66 going from one
// gateway to eight). So a new prefix bets on coming back and goes to its
// rendezvous home, which every router computes alike, while that home is
// near: this router's pending prefill there within slack of the least,
// its engine's KV cache not nearly full, and its engine reporting no
// waiting queue unless the bet pays (homeFinds). Those engine figures are
// the load every router sees alike (each router's pending prefill is its
// own share); they only turn a placement from the hash to the load, never
// exclude a replica, since a sample is up to a scrape interval old.
// Traffic that has shared nothing for a while (Options.UniqueRun) is not
// worth the bet (betsHome) and is placed by load, as alone.
func (c *candidates) nearRendezvous(slack int) bool {
	h := &c.replicas[c.rendezvous]
	return h.PendingPrefill <= c.replicas[c.coolest].PendingPrefill+slack &&
		(h.EngineWaiting <= 0 || c.mem.finds.pays.Load()) && h.KVUsage < kvFull
}

// homeFinds is what the new prefixes this router sent to their rendezvous
// home found cached there, as the engines reported it: a moving share of
// their prompt tokens over about the last homeFindsWindow of them. A
// router that finds nothing of a prompt has none of its conversation;
// where its new prefixes find a share of their prompt at their home,
// other routers sent those conversations there, and a prompt placed
// elsewhere by load, because the home's engine has a queue, finds nothing
// and starts a second copy that the next turns, through whichever router,
// do not follow. While the share is homeFindsShare or more (the bet
// pays), a home's queue is worth waiting in; where new prefixes are new
// (unique documents), the share is near nothing and the queue keeps the
// tail.
type homeFinds struct {
	mu             sync.Mutex
	cached, prompt float64 // moving averages, per placement
	n              int     // placements seen, up to homeFindsWindow
	pays           atomic.Bool
}

const (
	// homeFindsWindow is about how many placements the share averages.
	homeFindsWindow = 64
	// homeFindsShare is the share of a prompt at which the bet pays: a
	// placement by load finds a small fraction of what the home holds.
	homeFindsShare = 1.0 / 16
	// homeFindsMin is how many placements the share needs before it
	// counts: one lucky prompt does not make a pattern.
	homeFindsMin = homeFindsWindow / 4
)

// saw records what one placement at its rendezvous home found.
func (h *homeFinds) saw(cached, prompt int) {
	if prompt <= 0 {
		return
	}
	h.mu.Lock()
	h.cached += (float64(min(cached, prompt)) - h.cached) / homeFindsWindow
	h.prompt += (float64(prompt) - h.prompt) / homeFindsWindow
	h.n = min(h.n+1, homeFindsWindow)
	// Stored under the lock, so that concurrent reports leave the verdict
	// of the last one.
	h.pays.Store(h.n >= homeFindsMin && h.cached >= homeFindsShare*h.prompt)
	h.mu.Unlock()
}

// kvFull is the engine KV usage from which, with peers, a new prefix's
// rendezvous home is not where it waits: the engine would evict or
// preempt to make room (llm-d calls >= 0.8 saturated).
const kvFull = 0.95

// betsHome reports whether a new prefix goes to its rendezvous home when
// that is near, the directory aside: with peers, unless the router's last
// Options.UniqueRun keyed requests found nothing seen before.
func (s *prefixLoad) betsHome(mem *memory, peers bool) bool {
	return peers && !mem.returns.unique(s.opts.UniqueRun)
}

// returnWatch counts a router's keyed requests since the last one whose
// prefix it had seen before (believed resident on a replica, or with a
// home). With peers, sending a new prefix to its rendezvous home is a bet
// that it comes back, there or through another router; a long run of
// requests that found nothing says the bet does not pay.
type returnWatch struct{ since atomic.Int64 }

// saw counts one keyed request; back is whether its prefix was seen
// before.
func (w *returnWatch) saw(back bool) {
	if !back {
		w.since.Add(1)
	} else if w.since.Load() != 0 {
		w.since.Store(0)
	}
}

// unique reports whether the last run requests found nothing seen before
// (never for run <= 0).
func (w *returnWatch) unique(run int) bool {
	return run > 0 && w.since.Load() >= int64(run)
}
