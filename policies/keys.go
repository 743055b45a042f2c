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
	// the whole prompt; Blocks[0] is seeded with the deployment identity,
	// the model and cache_salt, every later block with the one before it.
	// Capped at ParseConfig.MaxBlocks.
	Blocks []uint64
	// BlockBytes is the size in bytes of the rendering the chain's first
	// blocks cover (ParseConfig.BlockSize); deeper blocks are larger
	// (ChainBytes). A Belief counts its capacity in blocks of this size.
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
	// OutputLimit is the most tokens the body asks to be generated: its
	// largest max_tokens, max_completion_tokens or max_output_tokens times
	// its n or best_of (outputlimit.go), 0 when it names none.
	OutputLimit int64
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
