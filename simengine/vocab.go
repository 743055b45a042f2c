package simengine

// outputWords is the fake model's output vocabulary. Every word is at most
// five letters, so with its leading space it is exactly one token of the
// tokenizer: text built from generated tokens tokenizes back to the same
// ids, which lets a multi-turn conversation hit the cache on the previous
// answer as it would on a real engine.
var outputWords = []string{
	"the", "of", "and", "to", "a", "in", "is", "that", "for", "it",
	"as", "with", "on", "be", "at", "by", "this", "from", "or", "an",
	"are", "was", "we", "can", "all", "which", "their", "has", "more", "one",
	"will", "each", "about", "how", "up", "out", "them", "then", "she", "many",
	"some", "so", "these", "would", "other", "into", "two", "time", "like", "first",
	"water", "been", "call", "who", "its", "now", "find", "long", "down", "day",
	"did", "get", "come", "made", "may", "part", "over", "new", "sound", "take",
	"only", "word", "work", "know", "place", "year", "live", "back", "give", "most",
	"very", "after", "thing", "our", "just", "name", "good", "man", "think", "say",
	"great", "where", "help", "line", "cache", "route", "block", "token", "model", "batch",
	"queue", "load", "fast", "cold", "warm", "hit", "miss", "prime", "seed", "node",
}

// vocab maps each output token id to its text (with the leading space).
var vocab = func() map[uint32]string {
	m := make(map[uint32]string, len(outputWords))
	for _, w := range outputWords {
		m[tokenID(" "+w)] = " " + w
	}
	return m
}()

// vocabIDs lists the output token ids in outputWords order.
var vocabIDs = func() []uint32 {
	ids := make([]uint32, len(outputWords))
	for i, w := range outputWords {
		ids[i] = tokenID(" " + w)
	}
	return ids
}()

// TokenText returns the text of a token the engine generated (a word with
// a leading space, e.g. " cache") and true, or "" and false for an id that
// is not in the output vocabulary.
func TokenText(id uint32) (string, bool) {
	s, ok := vocab[id]
	return s, ok
}

// outputToken is the index-th token the fake model generates for a
// sequence whose prompt hashed to seed. Like greedy decoding, the same
// prompt always yields the same answer.
func outputToken(seed uint64, index int) uint32 {
	h := mix64(seed + uint64(index+1)*0x9e3779b97f4a7c15)
	return vocabIDs[h%uint64(len(vocabIDs))]
}

// promptSeed hashes a whole prompt to the seed of its answer.
func promptSeed(prompt []uint32) uint64 {
	h := uint64(fnv64Offset)
	for _, t := range prompt {
		h ^= uint64(t)
		h *= fnv64Prime
	}
	return mix64(h)
}
