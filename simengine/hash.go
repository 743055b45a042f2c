package simengine

// FNV-1a constants, used for token ids (32-bit) and block hashes (64-bit).
const (
	fnv32Offset = 2166136261
	fnv32Prime  = 16777619
	fnv64Offset = 14695981039346656037
	fnv64Prime  = 1099511628211
)

// rootBlockHash is the parent hash of a sequence's first block.
const rootBlockHash uint64 = 0x6c6c6d726f757465 // "llmroute"

// tokenID hashes the bytes of one token to its id (32-bit FNV-1a).
func tokenID(b string) uint32 {
	h := uint32(fnv32Offset)
	for i := 0; i < len(b); i++ {
		h ^= uint32(b[i])
		h *= fnv32Prime
	}
	return h
}

// mix64 is the splitmix64 finaliser: a cheap, well-distributed bijection.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// chainHash returns the hash of one full block of tokens whose predecessor
// block hashed to parent. Equal (parent, tokens) always give equal hashes,
// so a block hash identifies the whole prefix that ends with that block.
func chainHash(parent uint64, tokens []uint32) uint64 {
	h := uint64(fnv64Offset) ^ mix64(parent)
	for _, t := range tokens {
		h ^= uint64(t)
		h *= fnv64Prime
	}
	return mix64(h)
}

// BlockHashes returns the chained hashes of every full block of tokens,
// blockSize tokens per block; a trailing partial block has no hash. These
// are the identities under which the engine caches KV blocks, so a caller
// (for example an oracle routing policy or a simulator) can compare
// prefixes without asking the engine.
func BlockHashes(tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]uint64, n)
	parent := rootBlockHash
	for i := range n {
		parent = chainHash(parent, tokens[i*blockSize:(i+1)*blockSize])
		out[i] = parent
	}
	return out
}
