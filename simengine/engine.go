package simengine

import (
	"fmt"
	"time"
)

// Engine is the model of one inference engine (one replica). It is not
// safe for concurrent use; see the package documentation.
type Engine struct {
	cfg     Config
	kv      *kvCache
	seqs    map[uint64]*sequence
	waiting []*sequence // FCFS; preempted sequences go back to the front
	running []*sequence // in admission order, oldest first
	stats   counters
	last    StepSummary
	sched   []scheduled // scratch, reused across steps
}

// scheduled is one sequence's share of a step.
type scheduled struct {
	s      *sequence
	n      int  // tokens computed for it this step
	decode bool // its single decode token, not prefill
}

// New returns an idle engine with an empty cache. Zero fields of cfg take
// their defaults; see Config.Normalize for the errors.
func New(cfg Config) (*Engine, error) {
	c, err := cfg.Normalize()
	if err != nil {
		return nil, err
	}
	return &Engine{
		cfg:  c,
		kv:   newKVCache(c.NumBlocks),
		seqs: make(map[uint64]*sequence),
	}, nil
}

// Config returns the engine's effective configuration.
func (e *Engine) Config() Config { return e.cfg }

// Submit queues a request at the back of the waiting queue. It takes
// effect at the next Step. Submit copies r.Prompt.
func (e *Engine) Submit(r Request) error {
	switch {
	case len(r.Prompt) == 0:
		return ErrEmptyPrompt
	case r.MaxTokens < 1:
		return ErrMaxTokens
	case len(r.Prompt)+r.MaxTokens > e.cfg.MaxModelLen:
		return fmt.Errorf("%w: %d prompt + %d max tokens > %d", ErrTooLong, len(r.Prompt), r.MaxTokens, e.cfg.MaxModelLen)
	}
	if _, dup := e.seqs[r.ID]; dup {
		return fmt.Errorf("%w: %d", ErrDuplicateID, r.ID)
	}
	s := newSequence(r, e.cfg.BlockSize)
	s.state = stateWaiting
	e.seqs[r.ID] = s
	e.waiting = append(e.waiting, s)
	e.stats.submitted++
	return nil
}

// Idle reports whether the engine holds no request; Step has nothing to
// do until the next Submit.
func (e *Engine) Idle() bool { return len(e.waiting) == 0 && len(e.running) == 0 }

// Step runs one engine iteration and returns its modelled duration and
// what happened in it. All events happen at the end of the step: a
// wall-clock driver sleeps dt before delivering them, a discrete-event
// simulator schedules them at now+dt and calls Step again then. The
// engine's state (cache contents included) already reflects the step's
// end when Step returns. Step on an idle engine returns 0 and no events.
//
// One step, as in vLLM's V1 scheduler:
//  1. every running sequence, oldest first, gets its next tokens within
//     the token budget: one decode token, or the next prefill chunk;
//     when the KV blocks for them cannot be had, the youngest running
//     sequence is preempted (its blocks freed, its progress dropped, and
//     it goes back to the front of the waiting queue), repeatedly, until
//     they can, or until the sequence itself was the one preempted;
//  2. if nothing was preempted, waiting requests are admitted in FCFS order
//     while fewer than MaxNumSeqs run, budget remains and their first
//     chunk's blocks can be had; each reuses its longest cached prefix;
//  3. every sequence whose tokens are all computed samples a token;
//     sequences that reach MaxTokens or OutputTokens finish and free
//     their blocks (cached content stays cached until evicted).
func (e *Engine) Step() (time.Duration, []Event) {
	if e.Idle() {
		return 0, nil
	}
	budget := e.cfg.MaxNumBatchedTokens
	e.sched = e.sched[:0]
	preempted := false

	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.remaining(), budget)
		decode := s.decoding()
		self := false
		for e.blocksNeeded(s, n) > e.kv.numFree {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == s {
				self = true
				break
			}
		}
		if self {
			break
		}
		e.grow(s, n)
		e.sched = append(e.sched, scheduled{s: s, n: n, decode: decode})
		budget -= n
	}

	if !preempted {
		for len(e.waiting) > 0 && len(e.running) < e.cfg.MaxNumSeqs && budget > 0 {
			n, ok := e.admit(e.waiting[0], budget)
			if !ok {
				break
			}
			s := e.waiting[0]
			e.waiting = e.waiting[1:]
			e.sched = append(e.sched, scheduled{s: s, n: n, decode: s.decoding()})
			budget -= n
		}
	}

	if len(e.sched) == 0 {
		return 0, nil // unreachable while the engine is not idle
	}
	prefill, decode := 0, 0
	for _, sc := range e.sched {
		if sc.decode {
			decode += sc.n
		} else {
			prefill += sc.n
		}
	}
	dt := e.cfg.StepTime(prefill, len(e.sched))
	e.stats.steps++
	e.stats.busy += dt
	e.last = StepSummary{Seqs: len(e.sched), PrefillTokens: prefill, DecodeTokens: decode, Duration: dt}

	var events []Event
	finished := false
	for _, sc := range e.sched {
		if e.advance(sc.s, sc.n, &events) {
			finished = true
		}
	}
	if finished {
		kept := e.running[:0]
		for _, s := range e.running {
			if s.state == stateRunning {
				kept = append(kept, s)
			}
		}
		clear(e.running[len(kept):])
		e.running = kept
	}
	return dt, events
}

// blocksNeeded is how many more blocks s needs to hold n more tokens.
func (e *Engine) blocksNeeded(s *sequence, n int) int {
	bs := e.cfg.BlockSize
	return (s.computed+n+bs-1)/bs - len(s.blocks)
}

// grow allocates the blocks s needs for n more tokens; the caller checked
// that enough are free.
func (e *Engine) grow(s *sequence, n int) {
	for k := e.blocksNeeded(s, n); k > 0; k-- {
		s.blocks = append(s.blocks, e.kv.allocate())
	}
}

// admit tries to move the waiting sequence s to running with a first chunk
// of at most budget tokens after its cached prefix. It returns the chunk
// size and whether s was admitted.
func (e *Engine) admit(s *sequence, budget int) (int, bool) {
	bs := e.cfg.BlockSize
	s.extendHashes(bs)
	// At least one token is always computed so a token can be sampled.
	maxHit := min((len(s.tokens)-1)/bs, len(s.hashes))
	hits := e.kv.match(s.hashes[:maxHit])
	cachedTok := len(hits) * bs
	n := min(len(s.tokens)-cachedTok, budget)
	need := (cachedTok+n+bs-1)/bs - len(hits)
	if need > e.kv.numFree-e.kv.freeAmong(hits) {
		return 0, false
	}
	for _, id := range hits {
		e.kv.acquire(id)
	}
	s.blocks = append(s.blocks[:0], hits...)
	s.registered = len(hits)
	s.computed = cachedTok
	e.grow(s, n)
	if s.cached < 0 {
		s.cached = cachedTok
		e.stats.queries += uint64(len(s.req.Prompt))
		e.stats.hits += uint64(cachedTok)
	}
	s.state = stateRunning
	e.running = append(e.running, s)
	return n, true
}

// preempt frees the blocks of the running sequence s (already removed from
// e.running), drops its progress and puts it at the front of the waiting
// queue, to be recomputed (with whatever prefix is still cached).
func (e *Engine) preempt(s *sequence) {
	e.releaseBlocks(s)
	s.computed, s.registered = 0, 0
	s.preemptions++
	s.state = stateWaiting
	e.waiting = append([]*sequence{s}, e.waiting...)
	e.stats.preemptions++
}

// releaseBlocks drops s's references, last block first, so that on the
// free list a prefix's tail is evicted before its head.
func (e *Engine) releaseBlocks(s *sequence) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		e.kv.release(s.blocks[i])
	}
	s.blocks = s.blocks[:0]
}

// advance applies n computed tokens to s, registers its newly full blocks,
// samples a token when all its tokens are computed and finishes it when
// done. It reports whether s finished.
func (e *Engine) advance(s *sequence, n int, events *[]Event) bool {
	bs := e.cfg.BlockSize
	s.computed += n
	s.extendHashes(bs)
	for full := s.computed / bs; s.registered < full; s.registered++ {
		e.kv.register(s.blocks[s.registered], s.hashes[s.registered])
	}
	if s.computed < len(s.tokens) {
		return false
	}
	idx := s.generated
	tok := outputToken(s.seed, idx)
	s.tokens = append(s.tokens, tok)
	s.generated++
	e.stats.generationTokens++
	if idx == 0 {
		e.stats.promptTokens += uint64(len(s.req.Prompt))
		*events = append(*events, Event{Kind: EventFirstToken, ID: s.req.ID, Token: tok, Index: 0, CachedTokens: s.cached})
	} else {
		*events = append(*events, Event{Kind: EventToken, ID: s.req.ID, Token: tok, Index: idx})
	}
	var reason FinishReason
	switch {
	case s.generated >= s.req.MaxTokens:
		reason = FinishLength
	case s.req.OutputTokens > 0 && s.generated >= s.req.OutputTokens:
		reason = FinishStop
	default:
		return false
	}
	e.releaseBlocks(s)
	s.state = 0
	delete(e.seqs, s.req.ID)
	e.stats.finished++
	*events = append(*events, Event{
		Kind:         EventFinished,
		ID:           s.req.ID,
		CachedTokens: s.cached,
		Reason:       reason,
		Usage: Usage{
			PromptTokens:     len(s.req.Prompt),
			CachedTokens:     s.cached,
			CompletionTokens: s.generated,
			Preemptions:      s.preemptions,
		},
	})
	return true
}

// Cancel removes a waiting or running request (its client went away),
// freeing its blocks; what it computed stays cached. It reports whether
// the engine held the request. No event is emitted for it.
func (e *Engine) Cancel(id uint64) bool {
	s, ok := e.seqs[id]
	if !ok {
		return false
	}
	delete(e.seqs, id)
	switch s.state {
	case stateWaiting:
		e.waiting = removeSeq(e.waiting, s)
	case stateRunning:
		e.running = removeSeq(e.running, s)
		e.releaseBlocks(s)
	}
	s.state = 0
	e.stats.cancelled++
	return true
}

func removeSeq(list []*sequence, s *sequence) []*sequence {
	for i, x := range list {
		if x == s {
			copy(list[i:], list[i+1:])
			list[len(list)-1] = nil
			return list[:len(list)-1]
		}
	}
	return list
}

// Restart models a crash and restart of the engine process: every request
// is dropped (their IDs are returned, running ones first, with no events),
// the cache is emptied and every counter of Stats starts again from zero,
// as a real process's Prometheus counters do.
func (e *Engine) Restart() []uint64 {
	ids := make([]uint64, 0, len(e.running)+len(e.waiting))
	for _, s := range e.running {
		ids = append(ids, s.req.ID)
	}
	for _, s := range e.waiting {
		ids = append(ids, s.req.ID)
	}
	e.kv.resetAll()
	clear(e.seqs)
	e.waiting, e.running = nil, nil
	e.stats = counters{}
	e.last = StepSummary{}
	return ids
}

// ResetPrefixCache forgets all cached content (like vLLM's
// /reset_prefix_cache) without touching requests or counters: running
// sequences keep their blocks, but nothing computed so far can be hit
// again. It returns the number of cached blocks forgotten.
func (e *Engine) ResetPrefixCache() int {
	return e.kv.dropAllHashes()
}

// CachedPrefixTokens returns how many tokens of a prompt made of tokens
// would be served from the cache if it were admitted now: the longest
// cached prefix of full blocks, leaving at least one token to compute.
// It changes no state (not even LRU order), so an oracle can call it
// freely.
func (e *Engine) CachedPrefixTokens(tokens []uint32) int {
	if len(tokens) < 2 {
		return 0
	}
	bs := e.cfg.BlockSize
	hashes := BlockHashes(tokens[:(len(tokens)-1)/bs*bs], bs)
	return e.kv.matchLen(hashes) * bs
}
