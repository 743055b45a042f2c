package caddymodule

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/policies"
)

// Slot holds (slot_hold): an engine whose prompt cache belongs to a slot
// that one request holds at a time (llama.cpp's server) cannot serve a
// second request of a prompt from the slot where the first one runs: it
// prefills the whole prompt into another slot, evicting what that one
// held, and the next request of the evicted prompt does the same. So a
// request whose prompt begins as one running here (the same leading run:
// its system and developer messages, or its first block without them;
// policies.HomeKey) may wait for that one to end and take its place,
// warm, instead.
//
// It waits only when that is expected to be quicker than its own prefill:
// the running request's expected remaining time (what this policy's
// requests hold their slot, on average, less what it has run), plus that
// of the requests already waiting before it, against its own prompt's
// expected time to first byte uncached (the average seconds per uncached
// prompt byte of recent misses). Until both are learned it waits up to
// slot_hold. Waiters of one prompt are handed the places of its requests
// that end, one each, in arrival order; none waits past slot_hold or past
// its own expected prefill.

// slotTracker is the one slotHolds of every policy with slot_hold: a
// reload's new policy sees the requests the old one is still serving
// (prompts are keyed by their leading run, which hashes the deployment
// and the model, so pools do not mix), and keeps what was learned. The
// estimates are shared too: pools of very different engines under one
// Caddy share one guess of a slot's span.
var slotTracker = newSlotHolds(clockwork.NewRealClock())

// slotHolds tracks the requests running by the key of their prompt's
// leading run, and what its requests take (the decision to wait is
// policies.SlotEstimate's).
type slotHolds struct {
	clk     clockwork.Clock
	mu      sync.Mutex
	running map[uint64]*holdRun
	est     policies.SlotEstimate
}

// holdRun is the requests running with one leading run: when each began,
// and the waiters, first come first, each handed the place of the next
// one to end.
type holdRun struct {
	starts  []time.Time
	waiting []*holdWaiter
}

// holdWaiter is one request waiting in a run; leave closes handed when it
// hands the waiter a place, which starts at start.
type holdWaiter struct {
	handed chan struct{}
	start  time.Time
}

// holdPlace is one request's place in a run, which leave gives back.
type holdPlace struct {
	run   *holdRun
	head  uint64
	start time.Time
}

func newSlotHolds(clk clockwork.Clock) *slotHolds {
	return &slotHolds{clk: clk, running: map[uint64]*holdRun{}}
}

// holdOutcome says how a request passed the hold.
type holdOutcome string

const (
	holdNone    holdOutcome = "none"    // nothing of its prompt ran
	holdEnded   holdOutcome = "ended"   // it waited, and took the place of one that ended
	holdTimeout holdOutcome = "timeout" // it waited as long as it would, and went beside
	holdSkipped holdOutcome = "skipped" // waiting was expected to take longer than its prefill
	holdGone    holdOutcome = "gone"    // its client left while it waited
)

// holdSample is what a finished request tells the estimates: how long it
// held its slot, its time to first byte, and how many of its prompt's
// bytes were uncached (0: unknown).
type holdSample struct {
	span, ttft    time.Duration
	uncachedBytes int
}

// holdSampleOf is what request rc, answered through ww by attempt a with
// outcome o, tells the estimates: nothing unless it succeeded; its span
// and time to first byte from the attempt's start; its uncached bytes
// when the engine's usage says most of the prompt was uncached (a miss's
// time to first byte is what a request that skips its hold pays).
func holdSampleOf(rc *routeCtx, ww *routeWriter, a *attempt, o outcome) holdSample {
	if a == nil || o.kind != outcomeSuccess || ww.firstByteAt.IsZero() || rc.req == nil {
		return holdSample{}
	}
	now := rc.holds.clk.Now()
	s := holdSample{span: now.Sub(a.started), ttft: ww.firstByteAt.Sub(a.started)}
	if sn := ww.sniff; sn != nil && sn.found && sn.promptTokens > 0 && 2*sn.cached <= sn.promptTokens {
		s.uncachedBytes = rc.req.Keys.Bytes * (sn.promptTokens - sn.cached) / sn.promptTokens
	}
	return s
}

// enter passes the hold for a request with leading-run key head and
// promptBytes of prompt: at once when none of its prompt runs or waiting
// is not worth it, else when a running one ends (its place is handed on)
// or its wait is over (at most limit); then the request counts as running
// until leave. The place is nil when the client left (ctx) while it
// waited.
func (h *slotHolds) enter(ctx context.Context, head uint64, promptBytes int, limit time.Duration) (*holdPlace, holdOutcome) {
	h.mu.Lock()
	now := h.clk.Now()
	r := h.running[head]
	if r == nil {
		r = &holdRun{}
		h.running[head] = r
	}
	if len(r.starts) == 0 {
		r.starts = append(r.starts, now)
		h.mu.Unlock()
		return &holdPlace{run: r, head: head, start: now}, holdNone
	}
	wait, ok := h.waitLocked(r, now, promptBytes, limit)
	if !ok {
		r.starts = append(r.starts, now)
		h.mu.Unlock()
		return &holdPlace{run: r, head: head, start: now}, holdSkipped
	}
	w := &holdWaiter{handed: make(chan struct{})}
	r.waiting = append(r.waiting, w)
	h.mu.Unlock()

	timer := h.clk.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.handed:
		// leave handed it the place of the one that ended.
		return &holdPlace{run: r, head: head, start: w.start}, holdEnded
	case <-timer.Chan():
	case <-ctx.Done():
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now = h.clk.Now()
	if i := slices.Index(r.waiting, w); i >= 0 {
		r.waiting = slices.Delete(r.waiting, i, i+1)
	} else {
		// Handed a place as it gave up: it holds that place now.
		p := &holdPlace{run: r, head: head, start: w.start}
		if ctx.Err() != nil {
			h.leaveLocked(p, holdSample{})
			return nil, holdGone
		}
		return p, holdEnded
	}
	if ctx.Err() != nil {
		return nil, holdGone
	}
	r.starts = append(r.starts, now)
	return &holdPlace{run: r, head: head, start: now}, holdTimeout
}

// waitLocked returns how long a new arrival of promptBytes in run r would
// wait, and whether that is worth it (policies.SlotEstimate.HoldWait).
func (h *slotHolds) waitLocked(r *holdRun, now time.Time, promptBytes int, limit time.Duration) (time.Duration, bool) {
	oldest := slices.MinFunc(r.starts, func(a, b time.Time) int { return a.Compare(b) })
	return h.est.HoldWait(now.Sub(oldest), len(r.starts), len(r.waiting), promptBytes, limit)
}

// leave gives back a place enter handed out, with what the request took.
func (h *slotHolds) leave(p *holdPlace, s holdSample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.leaveLocked(p, s)
}

func (h *slotHolds) leaveLocked(p *holdPlace, s holdSample) {
	h.est.Observe(s.span, s.ttft, s.uncachedBytes)
	r := p.run
	i := slices.Index(r.starts, p.start)
	if len(r.waiting) > 0 && i >= 0 {
		// Its place goes to the first waiter, who starts now.
		w := r.waiting[0]
		r.waiting = slices.Delete(r.waiting, 0, 1)
		w.start = h.clk.Now()
		r.starts[i] = w.start
		close(w.handed)
		return
	}
	if i >= 0 {
		r.starts = slices.Delete(r.starts, i, i+1)
	}
	if len(r.starts) == 0 && len(r.waiting) == 0 && h.running[p.head] == r {
		delete(h.running, p.head)
	}
}

// holding reports how many prompts have requests running or waiting.
func (h *slotHolds) holding() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.running)
}

// status is the policy's slot_hold in /llm_route/state (nil when off).
func (h *slotHolds) status(limit time.Duration) *stateapi.SlotHold {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := &stateapi.SlotHold{Limit: limit, Span: h.est.Span(), PrefillPerKiB: h.est.PrefillPerByte() * 1024, Prompts: len(h.running)}
	for _, r := range h.running {
		st.Waiting += len(r.waiting)
	}
	return st
}
