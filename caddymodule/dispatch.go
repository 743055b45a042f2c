package caddymodule

import (
	"context"

	"github.com/llmroute/caddy-llmroute/admission"
)

// Dispatch: a released slot, a cooldown's end or a new arrival kicks a
// pass; one pass at a time walks the queue in admission order and tries
// each waiter once.

// wake asks for a pass: a slot was released on addr, or its cooldown
// ended. Which replica does not matter: the pass follows the queue's order
// and tries whoever may use what is free.
func (s *scheduler) wake(addr string) { s.kick(false, false) }

// wakeAll asks for a pass that attempts every waiter: a reload changed
// the policy in charge, its caps, its replicas.
func (s *scheduler) wakeAll() { s.kick(true, false) }

// wakeAllFor asks for a pass that attempts every waiter: addr began to
// cool (waiters that have nothing else left must be refused now), or its
// probe passed (its whole cap opened).
func (s *scheduler) wakeAllFor(addr string) { s.kick(true, false) }

// maxPassesPerRun bounds the passes one goroutine runs before it hands
// the dispatcher to a new one, so that no caller is kept for long by
// releases that keep arriving.
const maxPassesPerRun = 8

// kick asks for a pass (attempting every waiter when all) and returns its
// number. With nobody waiting there is nothing to do. When no pass runs,
// the dispatcher starts: on this goroutine when inline (the caller holds
// no lock: an arrival in wait), else on a new one, because a release, a
// reload or a departure check may hold locks a pass needs.
func (s *scheduler) kick(all, inline bool) uint64 {
	s.mu.Lock()
	if s.q.Len() == 0 {
		n := s.done
		s.mu.Unlock()
		return n
	}
	s.dirty = true
	s.dirtyAll = s.dirtyAll || all
	target := s.gen + 1
	if s.running {
		s.mu.Unlock()
		return target
	}
	s.running = true
	s.mu.Unlock()
	if inline {
		s.run()
	} else {
		go s.run()
	}
	return target
}

// run is the dispatcher: passes while they are asked for, at most
// maxPassesPerRun on this goroutine.
func (s *scheduler) run() {
	for i := 0; ; i++ {
		s.mu.Lock()
		if !s.dirty {
			s.running = false
			s.mu.Unlock()
			return
		}
		if i == maxPassesPerRun {
			s.mu.Unlock()
			go s.run() // still running: the new goroutine goes on
			return
		}
		all := s.dirtyAll
		s.dirty, s.dirtyAll = false, false
		s.gen++
		n := s.gen
		s.mu.Unlock()
		s.pass(all)
		s.mu.Lock()
		s.done = n
		close(s.passed)
		s.passed = make(chan struct{})
		s.mu.Unlock()
	}
}

// waitPass waits until pass number target has ended (or ctx ends).
func (s *scheduler) waitPass(ctx context.Context, target uint64) {
	s.mu.Lock()
	for s.done < target {
		ch := s.passed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
		s.mu.Lock()
	}
	s.mu.Unlock()
}

// pass admits waiters in the queue's order until none is left that may
// find room: each is attempted at most once; one whose replicas an
// earlier attempt found full is skipped (unless all); a sheddable one is
// skipped once one of the same policy was refused for the sheddable
// share.
func (s *scheduler) pass(all bool) {
	full := map[string]struct{}{}
	shed := map[*LLMSelection]bool{}
	seen := map[*waiter]struct{}{}
	eligible := func(e *admission.Entry[*waiter]) bool {
		w := e.Value
		if _, ok := seen[w]; ok || w.state != waiting {
			return false
		}
		if e.Band() == admission.Sheddable && shed[w.pol] {
			return false
		}
		if all {
			return true
		}
		for a := range w.addrs {
			if _, ok := full[a]; !ok {
				return true
			}
		}
		return false
	}
	s.mu.Lock()
	n := s.q.Len()
	s.mu.Unlock()
	for range n {
		s.mu.Lock()
		e := s.q.Pick(eligible)
		if e == nil {
			s.mu.Unlock()
			return
		}
		w := e.Value
		seen[w] = struct{}{}
		w.state = claimed
		s.q.Claim(e)
		s.mu.Unlock()

		up, res := w.attempt()

		s.mu.Lock()
		switch {
		case up != nil:
			s.q.Admit(e)
			if tk := w.tk; tk != nil && !tk.holds {
				tk.holds, tk.charged = true, true
			}
			s.resolveLocked(w, waitResult{up: up})
		case res.refusal() != rejectNone:
			s.removeLocked(w, waitResult{res: res})
		case w.abandoned != nil:
			s.removeLocked(w, *w.abandoned)
		default:
			s.q.Unclaim(e)
			w.state = waiting
			if res.shed {
				shed[w.pol] = true
			} else {
				for a := range w.addrs {
					full[a] = struct{}{}
				}
			}
		}
		s.mu.Unlock()
	}
}

// flowStat is one tenant's place in the queue, for /llm_route/state.
type flowStat struct {
	name string
	admission.FlowStats
}

// flows returns every tenant's place in the queue.
func (s *scheduler) flows() []flowStat {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := s.q.Flows()
	out := make([]flowStat, 0, len(names))
	for _, n := range names {
		st, _ := s.q.Stats(n)
		out = append(out, flowStat{name: n, FlowStats: st})
	}
	return out
}
