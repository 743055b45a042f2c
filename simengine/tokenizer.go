package simengine

// The tokenizer is a deterministic stand-in for a BPE tokenizer. It is not
// meant to match any real vocabulary, only to behave like one where routing
// is concerned: tokens have variable byte lengths (so token blocks do not
// line up with the router's fixed-size byte blocks), English-like text
// averages about four bytes per token, equal text always gives equal ids,
// and a shared text prefix gives a shared token prefix up to the token that
// straddles the point where the texts differ.
//
// Rules, scanning left to right:
//   - a word is a run of letters, digits, '_' and non-ASCII bytes; a single
//     space or tab just before a word belongs to the word (" the");
//   - a word of at most 6 bytes (its leading space included) is one token;
//     longer words are cut into chunks of 4 to 6 bytes, the length chosen by
//     the chunk's second byte, with a last chunk of at most 6 bytes;
//   - other runs of spaces and tabs are tokens of up to 8 bytes;
//   - every newline, carriage return and punctuation byte is its own token.
//
// A token's id is the 32-bit FNV-1a hash of its bytes.

// maxWordToken is the longest word (with its leading space) kept whole.
const maxWordToken = 6

// maxSpaceToken is the longest run of blanks in one token.
const maxSpaceToken = 8

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// Tokenize splits text into token ids. It is deterministic and pure.
func Tokenize(text string) []uint32 {
	out := make([]uint32, 0, len(text)/4+1)
	TokenizeFunc(text, func(tok string) { out = append(out, tokenID(tok)) })
	return out
}

// TokenizeFunc calls emit with the text of every token of text, in order.
// Tokenize is TokenizeFunc with each token hashed to its id; tests and
// debugging tools use this form to see where the boundaries fall.
func TokenizeFunc(text string, emit func(tok string)) {
	n := len(text)
	i := 0
	for i < n {
		c := text[i]
		switch {
		case isBlank(c):
			j := i
			for j < n && isBlank(text[j]) {
				j++
			}
			end := j
			if j < n && isWordByte(text[j]) {
				end = j - 1 // the last blank goes with the word
			}
			for p := i; p < end; {
				q := min(p+maxSpaceToken, end)
				emit(text[p:q])
				p = q
			}
			if end < j {
				i = emitWord(text, end, emit)
			} else {
				i = j
			}
		case isWordByte(c):
			i = emitWord(text, i, emit)
		default:
			emit(text[i : i+1])
			i++
		}
	}
}

// emitWord emits the word starting at start (which may be a single blank
// followed by word bytes) and returns the index just past it.
func emitWord(text string, start int, emit func(tok string)) int {
	k := start
	if isBlank(text[k]) {
		k++
	}
	for k < len(text) && isWordByte(text[k]) {
		k++
	}
	for p := start; p < k; {
		rem := k - p
		take := rem
		if rem > maxWordToken {
			take = 4 + int(text[p+1])%3
		}
		emit(text[p : p+take])
		p += take
	}
	return k
}
