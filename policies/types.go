package policies

// Endpoint says which OpenAI-compatible API a body was parsed for.
type Endpoint int

const (
	// EndpointUnknown is any path llmroute does not parse; it routes by load.
	EndpointUnknown Endpoint = iota
	// EndpointChat is /v1/chat/completions.
	EndpointChat
	// EndpointCompletions is /v1/completions.
	EndpointCompletions
	// EndpointResponses is /v1/responses.
	EndpointResponses
	// EndpointMessages is Anthropic's /v1/messages; it keys like the chat
	// request with the same conversation (messages.go).
	EndpointMessages
	// EndpointCountTokens is Anthropic's /v1/messages/count_tokens: its
	// model is read, it has no prefix (nothing is cached by counting).
	EndpointCountTokens
)

// Keys are the prefix keys of one request.
type Keys struct {
	// Leading hashes the deployment identity, the model, cache_salt, the
	// tools and the leading system/developer messages. Zero means no key.
	Leading uint64
	// Blocks is the chain of block hashes over the canonical rendering of
	// the whole prompt; Blocks[0] is seeded with Leading and every later
	// block with the one before it. Capped at ParseConfig.MaxBlocks.
	Blocks []uint64
	// BlockBytes is the size in bytes of the rendering each block covers
	// (ParseConfig.BlockSize); a Belief counts its capacity in these blocks.
	BlockBytes int
	// LeadingBlocks is how many of Blocks lie wholly within the leading
	// run (the part Leading hashes: system/developer messages,
	// instructions): a match no longer than it is a match of the shared
	// prefix every request with this Leading key has.
	LeadingBlocks int
	// Bytes is the size of the whole canonical rendering
	// (Request.PromptBytes), past the block cap too: the prefill a replica
	// does for what it does not hold.
	Bytes int

	// end is where the chain stopped, so that an answer can extend it
	// (NewAnswer).
	end chainEnd
}

// Request is what the router needs to know of one request body.
type Request struct {
	Endpoint     Endpoint
	Model        string
	Stream       bool
	IncludeUsage bool // stream_options.include_usage as the client sent it
	// HasStreamOptions is set when the body has a stream_options field of
	// its own (any value): llm_route then asks for no usage itself.
	HasStreamOptions bool
	CacheSalt        string
	// PromptCacheKey is the body's prompt_cache_key ("" if none).
	PromptCacheKey string
	// PreviousResponseID and Conversation are a /v1/responses request's
	// previous_response_id and conversation id ("" if none): state that
	// lives on the replica that made it.
	PreviousResponseID, Conversation string
	// InputHasHistory is set when a /v1/responses input carries earlier
	// turns (assistant messages, tool outputs): it can stand without the
	// state previous_response_id names.
	InputHasHistory bool
	PromptBytes     int // bytes of the canonical rendering (before the block cap)
	Keys            Keys
	// NoPrefix is empty when Keys were computed, otherwise why not (for
	// example "unsupported endpoint" or "messages is not an array"); such a
	// request is routed by load alone.
	NoPrefix string
}

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

// Reason names the rule a strategy picked a replica by (prefix_load's
// rules; see prefixLoad), for logs and metrics.
type Reason string

// The reasons prefix_load gives.
const (
	ReasonLeastLoad  Reason = "least_load" // no keys: the least-loaded replica
	ReasonHistory    Reason = "history"    // its own history is resident there
	ReasonHot        Reason = "hot"        // a hot prefix spilled past the bound
	ReasonLeading    Reason = "leading"    // its shared leading run is there
	ReasonHome       Reason = "home"       // its recorded home
	ReasonDetour     Reason = "detour"     // its place had too much prefill queued
	ReasonLoad       Reason = "load"       // a new prefix, placed by load
	ReasonRendezvous Reason = "rendezvous" // a new prefix at its rendezvous home
	ReasonClaimed    Reason = "claimed"    // a new prefix another router placed
)

// Reasoner is a Strategy that says which rule made each pick.
type Reasoner interface {
	// PickReason is Pick, with the rule that decided ("" for -1).
	PickReason(keys Keys, replicas []Replica) (int, Reason)
}

// Strategy picks a replica for one request. Implementations are safe for
// concurrent use and deterministic given their seed.
type Strategy interface {
	// Name is the strategy's configuration name, e.g. "prefix_load".
	Name() string
	// Pick returns the index in replicas of the chosen replica, which is
	// always Free, or -1 when no replica is Free. keys may be empty.
	Pick(keys Keys, replicas []Replica) int
}

// Successor is a Strategy that can take over what another learned while
// routing the same replicas (a reload's new configuration replacing the
// old one's). Inherit reports whether it took anything from prev, which may
// be any Strategy; it is called before the successor's first Pick.
type Successor interface {
	Inherit(prev Strategy) bool
}

// CheckObserver is a Strategy that learns from the engines' reports: the
// caller passes it each prediction checked against the cached tokens an
// engine reported (Belief.Check's input and verdict), for requests it
// routed.
type CheckObserver interface {
	Observe(c Check, result CheckResult)
}

// PeerSensor is a Strategy that tells whether it treats the replicas as
// shared with other routers (configured, or inferred from the engines),
// and whether it now sends new prefixes to their rendezvous home (with
// peers and no Directory, unless its traffic has shared nothing for
// Options.UniqueRun requests).
type PeerSensor interface {
	Peers() bool
	HomesNewPrefixes() bool
}
