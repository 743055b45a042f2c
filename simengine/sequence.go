package simengine

// seqState is where a sequence is in the engine.
type seqState uint8

const (
	stateWaiting seqState = iota + 1
	stateRunning
)

// sequence is the engine's record of one request.
type sequence struct {
	req    Request
	state  seqState
	tokens []uint32 // prompt followed by the generated tokens
	// hashes are the chained hashes of the full blocks of tokens computed
	// so far (extended lazily as tokens are appended).
	hashes []uint64
	// blocks are the KV blocks holding tokens[0:computed] (and the room
	// reserved for this step's tokens).
	blocks []int32
	// registered counts the leading blocks already registered in the cache.
	registered int
	// computed counts the tokens whose KV is in blocks.
	computed  int
	generated int
	// cached is the prompt tokens found in the prefix cache at the first
	// admission; -1 before it.
	cached      int
	preemptions int
	seed        uint64
}

func newSequence(r Request, blockSize int) *sequence {
	tokens := make([]uint32, len(r.Prompt), len(r.Prompt)+min(r.MaxTokens, 256))
	copy(tokens, r.Prompt)
	return &sequence{
		req:    r,
		tokens: tokens,
		hashes: BlockHashes(tokens, blockSize),
		cached: -1,
		seed:   promptSeed(r.Prompt),
	}
}

// extendHashes hashes any full block of tokens not hashed yet.
func (s *sequence) extendHashes(blockSize int) {
	for full := len(s.tokens) / blockSize; len(s.hashes) < full; {
		i := len(s.hashes)
		parent := rootBlockHash
		if i > 0 {
			parent = s.hashes[i-1]
		}
		s.hashes = append(s.hashes, chainHash(parent, s.tokens[i*blockSize:(i+1)*blockSize]))
	}
}

// remaining is the number of tokens still to compute before the next
// token can be sampled.
func (s *sequence) remaining() int { return len(s.tokens) - s.computed }

// decoding reports whether the sequence only needs its single decode
// token (as opposed to a prompt or recompute prefill).
func (s *sequence) decoding() bool { return s.generated > 0 && s.remaining() == 1 }
