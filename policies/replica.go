package policies

// Replica is the state of one replica as a Strategy sees it at decision
// time. The caller builds the slice; strategies never modify it.
type Replica struct {
	// Addr identifies the replica (its dial address); rendezvous hashing
	// uses it, so every router instance must use the same string.
	Addr string
	// AddrHash is HashAddr(Addr), or 0 to have the strategies hash Addr at
	// each decision; a caller that keeps it per replica saves that hash.
	AddrHash uint64
	// InFlight counts requests this router has reserved on the replica.
	InFlight int
	// Cap is the most requests in flight allowed; 0 means no cap.
	Cap int
	// Unavailable is true while the replica is cooling down, unhealthy,
	// already tried by this request, or waiting for its probe's answer.
	Unavailable bool
	// EngineWaiting is the engine's queue length when known and fresh,
	// else -1 (unknown, never "idle").
	EngineWaiting int
	// EngineRunning is the engine's running-sequence count, -1 if unknown.
	EngineRunning int
	// InFlightSinceSample is how much InFlight has grown since the engine
	// figures were sampled (negative when it shrank): InFlight minus it is
	// what this router had in flight there when the engine counted its
	// running and waiting requests, the figure prefix_load's peer sense
	// compares them with. 0 judges them against InFlight.
	InFlightSinceSample int
	// KVUsage is the engine's KV cache usage in [0,1], -1 if unknown.
	// Only prefix_load reads it, with peers, to place a new prefix by
	// load rather than at a full rendezvous home; it never excludes a
	// replica: sampled up to a scrape interval ago, a cut at a full cache
	// sent a second's traffic to the replicas that had reported less.
	KVUsage float64
	// Prefilling counts this router's requests on the replica that have
	// not produced their first byte yet: prompts still being prefilled or
	// queued. They are the part of the in-flight count that delays a new
	// request's first token, so Load counts them twice.
	Prefilling int
	// PendingPrefill is the prompt this router sent to the replica that is
	// believed uncached and still awaiting its first byte, in blocks of the
	// requests' size (Belief.Pending): the prefill work queued ahead of a
	// new request, which sets its time to first token.
	PendingPrefill int
	// Index answers how much of a request's prefix the replica is believed
	// to hold: its residency index (*Index), or, in the simulator's oracle,
	// the engine's true cache. nil means nothing believed.
	Index Resident
}

// Full reports whether the replica is at its cap.
func (r *Replica) Full() bool { return r.Cap > 0 && r.InFlight >= r.Cap }

// Free reports whether the replica can take one more request now.
func (r *Replica) Free() bool { return !r.Unavailable && !r.Full() }

// Load is the load figure strategies compare: the router's own in-flight
// count, plus its requests still waiting for a first byte (a decode step
// is shared by the batch; a pending prefill delays everyone behind it),
// plus the engine's waiting queue when that is known.
func (r *Replica) Load() int {
	l := r.InFlight + max(r.Prefilling, 0)
	if r.EngineWaiting > 0 {
		l += r.EngineWaiting
	}
	return l
}

// Resident answers how many leading blocks of a chain (Keys.Blocks) a
// replica is believed to hold. *Index is the router's answer.
type Resident interface {
	Match(blocks []uint64) int
}
