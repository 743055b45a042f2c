package policies

import (
	"sync"
	"sync/atomic"
)

// The residency belief: what one router believes one replica's prefix
// cache holds, and the rules that keep the belief honest. The Caddy module
// keeps one Belief per replica; the simulator keeps one per replica per
// router instance, so that it measures these rules, not a copy of them.
//
// A belief is corrected from two signals the engine gives:
//   - the cached tokens it reports in each answer's usage (Check): a
//     prediction was a hit, a miss, partial (the engine had less than half
//     of what was believed), cold (nothing believed) or concurrent
//     (believed, found less, but another request of that prefix was still
//     before its first byte there, so the engine was still computing it).
//     Misses shrink the index (it believes more than the engine keeps),
//     hits let it grow back (additive increase, multiplicative decrease);
//     while the engine's cache size is unknown a partial also says how
//     much it keeps at most (the prediction's reach), and a hit how much
//     it keeps at least, which bound the shrink;
//     and a run of misses on long predictions means the cache was wiped:
//     the index is purged. Partials shrink it too until the engine's
//     metrics give its cache size: where every prompt opens alike (one
//     system prompt, one tool list) the engine always has that opening,
//     and a belief that outgrew a cache of unknown size would otherwise
//     never see a miss;
//   - its metrics (Engine): the cache size caps the index, and a prefix
//     cache counter going backwards means a restart: the index is purged.
//
// A Belief reads no clock: every rule counts events, none measures time.

const (
	// BytesPerToken is the router's estimate of prompt bytes per engine
	// token, where it has no tokenizer: to size the index from an engine's
	// cache (blocks x tokens per block) and to turn predicted blocks into
	// tokens. English text under BPE tokenizers runs at 3.5-4.5 bytes per
	// token; the simulated engine's tokenizer at about 3.9.
	BytesPerToken = 4

	// MinIndexBlocks is the floor of an index shrunk by misses or sized
	// from a small engine cache: below it too little is believed for a
	// prefix to be followed at all.
	MinIndexBlocks = 64

	// purgeMissRun consecutive misses, each on a prediction of at least
	// purgeMinBlocks blocks, mean the engine lost its cache (a restart or
	// a reset): shorter predictions miss for ordinary reasons (eviction of
	// a tail), long ones do not miss three times in a row by chance.
	purgeMissRun   = 3
	purgeMinBlocks = 4

	// partialMinBlocks is the shortest prediction a partial verdict
	// judges: under it, the engine's own block rounding (16 tokens and
	// more) and its chat template's tokens can make half of a prediction
	// look missing when nothing is.
	partialMinBlocks = 4
)

// Purge reasons, as Stats and the module's metrics name them.
const (
	// PurgeHitsCollapsed: purgeMissRun misses in a row on long predictions.
	PurgeHitsCollapsed = "hits_collapsed"
	// PurgeCountersReset: the engine's prefix-cache counter went backwards.
	PurgeCountersReset = "counters_reset"
	// PurgeRemoved: the replica left the upstream set (the caller's purge).
	PurgeRemoved = "removed"
)

// CheckResult is the verdict on one prediction.
type CheckResult string

// The verdicts Check returns.
const (
	// CheckHit: a prefix was believed resident and the engine had some.
	CheckHit CheckResult = "hit"
	// CheckMiss: a prefix was believed resident and the engine had none.
	CheckMiss CheckResult = "miss"
	// CheckPartial: a prefix of at least partialMinBlocks blocks was
	// believed resident and the engine had less than half of it, in its
	// own tokens: the belief kept what the engine evicted.
	CheckPartial CheckResult = "partial"
	// CheckConcurrent: a miss or a partial while another request of the
	// same prefix was still before its first byte on the replica; says
	// nothing of the index.
	CheckConcurrent CheckResult = "concurrent"
	// CheckCold: nothing was believed resident.
	CheckCold CheckResult = "cold"
)

// Belief is one router's belief about one replica's prefix cache: its
// residency Index plus the rules that size and correct it. It is safe for
// concurrent use.
type Belief struct {
	// Internal data
	index *Index // has its own lock

	mu sync.Mutex
	// configuredBytes is the operator's capacity (index_blocks, in blocks
	// of DefaultBlockSize bytes), used until the engine reports its cache.
	configuredBytes int
	// engineBytes is the prompt text the engine's cache holds, from its
	// metrics (blocks x tokens per block x BytesPerToken); 0 until known.
	engineBytes int
	// blockBytes is the block size of the requests routed here; the index
	// counts in these blocks.
	blockBytes int
	// sized is engineBytes > 0, read by Place without the lock.
	sized atomic.Bool
	// lastQueries is the engine's prefix-cache query counter at the last
	// sample (0 before the first, < 0 when the engine has none).
	lastQueries float64
	// pending counts, by the first block of their prompt, the requests
	// Placed here that have not had their first byte: the engine may still
	// be computing that prefix.
	pending map[uint64]int
	missRun int
	// hitReach is the farthest reach of a hit since the index last
	// shrank below it (or was purged): the engine kept at least that much.
	hitReach int
	stats    BeliefStats
}

// BeliefStats counts what a Belief was told.
type BeliefStats struct {
	Checks, Hits, Misses, Partials, Cold, Concurrent int
	Purges                                           int
	// LastPurge is the reason of the last purge, "" if none.
	LastPurge string
	// MaxCapacity is the most blocks the index may grow to now.
	MaxCapacity int
	// FromEngine is true once the engine's metrics gave the cache size.
	FromEngine bool
}

// Precision is hits / (hits + misses + partials): how often a believed
// prefix was there. 0 before any such check.
func (s BeliefStats) Precision() float64 {
	judged := s.Hits + s.Misses + s.Partials
	if judged == 0 {
		return 0
	}
	return float64(s.Hits) / float64(judged)
}

// NewBelief returns an empty belief whose index holds capacityBlocks
// blocks of DefaultBlockSize bytes (< 1 selects DefaultIndexCapacity)
// until the engine reports its cache size.
func NewBelief(capacityBlocks int) *Belief {
	if capacityBlocks < 1 {
		capacityBlocks = DefaultIndexCapacity
	}
	return &Belief{
		index:           NewIndex(capacityBlocks),
		configuredBytes: capacityBlocks * DefaultBlockSize,
		blockBytes:      DefaultBlockSize,
	}
}

// Index returns the residency index, for a strategy's Replica view.
func (b *Belief) Index() *Index { return b.index }

// Configure sets the operator's capacity (blocks of DefaultBlockSize
// bytes). While the engine has not reported its cache size the index
// takes it at once; after that the engine's size rules.
func (b *Belief) Configure(capacityBlocks int) {
	if capacityBlocks < 1 {
		capacityBlocks = DefaultIndexCapacity
	}
	b.mu.Lock()
	b.configuredBytes = capacityBlocks * DefaultBlockSize
	sized := b.engineBytes > 0
	n := b.maxBlocksLocked()
	b.mu.Unlock()
	if !sized && b.index.Capacity() != n {
		b.index.SetCapacity(n)
	}
}

// maxBlocksLocked is the capacity the index may grow to: the engine's cache
// (never below MinIndexBlocks) once known, else the configured one, in
// blocks of the requests' size.
func (b *Belief) maxBlocksLocked() int {
	if b.engineBytes > 0 {
		return max(b.engineBytes/b.blockBytes, MinIndexBlocks)
	}
	return max(b.configuredBytes/b.blockBytes, 1)
}

// Placement is what Place found: the blocks believed resident before the
// request was added, and whether a request with the same first block was
// still awaiting its first byte there.
type Placement struct {
	Predicted  int
	Concurrent bool
	// Head is the prompt's first block, counted pending until EndPending
	// (0: none was counted).
	Head uint64
	// Reach is, while the engine's cache size is unknown, the prediction's
	// reach (Index.MatchInsertReach): the blocks placed here since its last
	// block was. 0 when not measured.
	Reach int
}

// Place records that a request with keys is sent to the replica: it
// returns the prediction, adds the chain to the index (optimistic: the
// engine will cache what it is sent; Check corrects this) and counts the
// prompt as pending until EndPending(Placement.Head). Keys.BlockBytes,
// when it differs from the blocks counted so far, rescales the capacity
// so that it still covers as many bytes.
func (b *Belief) Place(keys Keys) Placement {
	if keys.BlockBytes > 0 {
		b.useBlockBytes(keys.BlockBytes)
	}
	if len(keys.Blocks) == 0 {
		return Placement{}
	}
	var p Placement
	p.Predicted, p.Reach = b.index.matchInsert(keys.Blocks, !b.sized.Load())
	p.Head = keys.Blocks[0]
	b.mu.Lock()
	if b.pending == nil {
		b.pending = map[uint64]int{}
	}
	p.Concurrent = b.pending[p.Head] > 0
	b.pending[p.Head]++
	b.mu.Unlock()
	return p
}

// useBlockBytes switches the index to blocks of n bytes.
func (b *Belief) useBlockBytes(n int) {
	b.mu.Lock()
	if n == b.blockBytes {
		b.mu.Unlock()
		return
	}
	old := b.blockBytes
	b.blockBytes = n
	limit := b.maxBlocksLocked()
	b.mu.Unlock()
	c := b.index.Capacity() * old / n
	b.index.SetCapacity(min(max(c, 1), limit))
}

// EndPending ends the pending count of a placed prompt whose first block
// is head (Placement.Head): its first byte arrived, or it ended without.
func (b *Belief) EndPending(head uint64) {
	if head == 0 {
		return
	}
	b.mu.Lock()
	if b.pending[head]--; b.pending[head] <= 0 {
		delete(b.pending, head)
	}
	b.mu.Unlock()
}

// Check is one prediction to hold against what the engine reported.
type Check struct {
	// PredictedBlocks is Placement.Predicted.
	PredictedBlocks int
	// Concurrent is Placement.Concurrent.
	Concurrent bool
	// CachedTokens and PromptTokens are the engine's usage figures.
	CachedTokens, PromptTokens int
	// PromptBytes is the size of the canonical prompt the blocks were cut
	// from (Request.PromptBytes).
	PromptBytes int
	// Reach is Placement.Reach.
	Reach int
	// Reason is the rule that placed the request, from a Reasoner
	// strategy ("" otherwise); the belief does not read it.
	Reason Reason
}

// Checked is Check's verdict.
type Checked struct {
	Result CheckResult
	// PredictedTokens is the prediction in the engine's tokens (believed
	// bytes scaled by the engine's own bytes per token on this prompt, at
	// most the prompt); 0 when the usage carried no prompt size.
	PredictedTokens int
	// Purged is set when this check purged the index (PurgeHitsCollapsed).
	Purged bool
}

// Check holds one prediction against the engine's report and corrects the
// belief: a miss shrinks the index by 1/8 (never below MinIndexBlocks), a
// hit grows it by 1/64 up to its maximum, purgeMissRun misses in a row on
// predictions of at least purgeMinBlocks blocks purge it. A partial ends
// such a run (the engine still holds something) and shrinks the index as
// a miss does while the engine has not reported its cache size, which the
// partials then stand for. Once it has, the index is capped at that size
// and a partial says that other clients' prompts took the rest of the
// cache: a smaller index would forget the prefixes they keep warm there
// too, and would not see the engine's cache any better.
//
// While the size is unknown, a partial whose prediction had a reach
// (Placement.Reach) also says the engine keeps less than that reach of
// what this router sends it (a cache full of it evicts a chain from its
// tail, as the index does), as a hit at a reach says it keeps at least
// that much. A partial beyond the farthest hit's reach shrinks the index
// to its reach, by at most half a verdict, rather than by 1/8, so that an
// index configured far above an unreported cache learns its size in a few
// verdicts instead of some twenty a replica. One within it contradicts a
// hit (a slot that did not hold the prompt, another client's burst) and
// shrinks by 1/8, as a miss does: nothing cached at all is as often a
// cache lost whole (a restart, which a run of misses purges) as one too
// small.
func (b *Belief) Check(c Check) Checked {
	b.mu.Lock()
	out := Checked{PredictedTokens: PredictedTokens(c.PredictedBlocks, b.blockBytes, c.PromptBytes, c.PromptTokens)}
	out.Result = Classify(c.PredictedBlocks, c.Concurrent, c.CachedTokens, out.PredictedTokens)
	s := &b.stats
	s.Checks++
	switch out.Result {
	case CheckHit:
		s.Hits++
		b.missRun = 0
		b.hitReach = max(b.hitReach, c.Reach)
	case CheckMiss:
		s.Misses++
		if c.PredictedBlocks >= purgeMinBlocks {
			b.missRun++
			out.Purged = b.missRun >= purgeMissRun
		}
	case CheckPartial:
		s.Partials++
		b.missRun = 0
	case CheckConcurrent:
		s.Concurrent++
	default:
		s.Cold++
	}
	limit := b.maxBlocksLocked()
	sized := b.engineBytes > 0
	hitReach := b.hitReach
	b.mu.Unlock()

	if out.Purged {
		b.Purge(PurgeHitsCollapsed)
		return out
	}
	capNow := b.index.Capacity()
	switch {
	case out.Result == CheckMiss, out.Result == CheckPartial && !sized:
		reach := 0 // a miss shrinks by 1/8 whatever its reach
		if out.Result == CheckPartial {
			reach = c.Reach
		}
		next := shrunk(capNow, reach, hitReach)
		b.index.SetCapacity(next)
		b.mu.Lock()
		b.hitReach = min(b.hitReach, next)
		b.mu.Unlock()
	case out.Result == CheckHit:
		if capNow < limit {
			b.index.SetCapacity(min(capNow+max(capNow/64, 1), limit))
		}
	}
	return out
}

// shrunk is the capacity after a miss or an unsized partial at capacity
// n: 7/8 of n, or the partial's reach (never under half of n) when that
// is less and beyond hitReach; never under MinIndexBlocks. A partial
// shrinks only while the engine's size is unknown, which is also when
// Place measures its reach (0 otherwise).
func shrunk(n, reach, hitReach int) int {
	next := n * 7 / 8
	if reach > hitReach && reach < next {
		next = max(reach, n/2)
	}
	return max(next, MinIndexBlocks)
}

// Classify is the verdict on a prediction of predicted blocks, made with
// concurrent set as Placement.Concurrent, when the engine reported
// cachedTokens; predictedTokens is the prediction in the engine's tokens
// (PredictedTokens: 0 when the usage gave no prompt size, and then no
// verdict is partial).
func Classify(predicted int, concurrent bool, cachedTokens, predictedTokens int) CheckResult {
	partial := predicted >= partialMinBlocks && 2*cachedTokens < predictedTokens
	switch {
	case predicted > 0 && cachedTokens > 0 && partial && concurrent:
		return CheckConcurrent
	case predicted > 0 && cachedTokens > 0 && partial:
		return CheckPartial
	case predicted > 0 && cachedTokens > 0:
		return CheckHit
	case predicted > 0 && concurrent:
		return CheckConcurrent
	case predicted > 0:
		return CheckMiss
	}
	return CheckCold
}

// PredictedTokens turns a prediction of predicted blocks of a chain of
// blockBytes-sized blocks (ChainBytes) into the engine's tokens, with the engine's own bytes per token on this
// prompt (promptTokens for promptBytes of canonical rendering), at most
// the prompt; 0 when either size is unknown.
func PredictedTokens(predicted, blockBytes, promptBytes, promptTokens int) int {
	if promptTokens <= 0 || promptBytes <= 0 {
		return 0
	}
	return min(ChainBytes(predicted, blockBytes)*promptTokens/promptBytes, promptTokens)
}

// EngineCache is what an engine's metrics say of its prefix cache.
type EngineCache struct {
	// NumBlocks and BlockTokens size the cache (vLLM's num_gpu_blocks and
	// block_size); 0 when not reported.
	NumBlocks, BlockTokens int
	// PrefixQueries is the engine's prefix-cache query counter, < 0 when
	// it has none.
	PrefixQueries float64
}

// Engine applies one scrape of the engine's metrics: the cache size caps
// the index, and a prefix-cache counter lower than the last one means the
// engine restarted with an empty cache, so the index is purged (reported
// as true). A scrape without the counter keeps the last one: SGLang
// exports its counters only once first written, so a restarted engine's
// are absent until its first request.
func (b *Belief) Engine(e EngineCache) (purged bool) {
	b.mu.Lock()
	restarted := b.lastQueries > 0 && e.PrefixQueries >= 0 && e.PrefixQueries < b.lastQueries
	if e.PrefixQueries >= 0 {
		b.lastQueries = e.PrefixQueries
	}
	sized := e.NumBlocks > 0 && e.BlockTokens > 0
	if sized {
		b.engineBytes = e.NumBlocks * e.BlockTokens * BytesPerToken
		b.sized.Store(true)
	}
	limit := b.maxBlocksLocked()
	b.mu.Unlock()
	if restarted {
		b.Purge(PurgeCountersReset)
	}
	if sized && b.index.Capacity() > limit {
		b.index.SetCapacity(limit)
	}
	return restarted
}

// Purge forgets everything believed resident, for the given reason.
func (b *Belief) Purge(reason string) {
	b.index.Purge()
	b.mu.Lock()
	b.stats.Purges++
	b.stats.LastPurge = reason
	b.missRun, b.hitReach = 0, 0
	b.mu.Unlock()
}

// Stats returns the counts so far and the current maximum capacity.
func (b *Belief) Stats() BeliefStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.FromEngine = b.engineBytes > 0
	if s.FromEngine {
		s.MaxCapacity = b.maxBlocksLocked()
	}
	return s
}
