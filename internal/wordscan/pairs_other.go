//go:build !amd64

package wordscan

// simdPairs: Occur calls bytes.Contains a word.
const simdPairs = false

func indexPair(b []byte, pairs *[2 * MaxWords]byte) int { return indexPairRef(b, pairs) }
