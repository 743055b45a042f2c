package gguf

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Qwen2PreTokenizerRegex is the split pattern of the Qwen2/Qwen3
// pre-tokenizer in tokenizer.json. llama.cpp does not read the pattern from
// the GGUF: it applies a built-in recipe named by tokenizer.ggml.pre, so
// LoadHFTokenizer accepts a tokenizer only when its pattern is the one the
// "qwen2" recipe implements.
const Qwen2PreTokenizerRegex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// Tokenizer is a BPE vocabulary as llama.cpp reads it from a GGUF
// (tokenizer.ggml.*), taken from a Hugging Face tokenizer.json and
// tokenizer_config.json.
type Tokenizer struct {
	// Model is tokenizer.ggml.model ("gpt2": byte-level BPE) and Pre is
	// tokenizer.ggml.pre, the pre-tokenizer recipe ("qwen2").
	Model, Pre string
	// Tokens and Types are indexed by token id; ids past the tokenizer's
	// own are padding ("[PAD<id>]", TokenUnused) up to the model's rows.
	Tokens []string
	Types  []int32
	// Merges are the BPE merges in rank order, as "left right".
	Merges []string
	// BOS, EOS and PAD are token ids; AddBOS says whether llama.cpp should
	// put BOS before a tokenized text.
	BOS, EOS, PAD int
	AddBOS        bool
	// ChatTemplate is the Jinja chat template (tokenizer.chat_template).
	ChatTemplate string
	// Added is how many added tokens (special and not) tokenizer.json has.
	Added int
}

type hfTokenizerJSON struct {
	Model struct {
		Type   string            `json:"type"`
		Vocab  map[string]int    `json:"vocab"`
		Merges []json.RawMessage `json:"merges"`
	} `json:"model"`
	AddedTokens []struct {
		ID      int    `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer struct {
		Type          string `json:"type"`
		PreTokenizers []struct {
			Type    string `json:"type"`
			Pattern struct {
				Regex string `json:"Regex"`
			} `json:"pattern"`
		} `json:"pretokenizers"`
	} `json:"pre_tokenizer"`
}

type hfConfigJSON struct {
	ChatTemplate json.RawMessage `json:"chat_template"`
	EOS          json.RawMessage `json:"eos_token"`
	PAD          json.RawMessage `json:"pad_token"`
	BOS          json.RawMessage `json:"bos_token"`
	AddBOS       bool            `json:"add_bos_token"`
}

// LoadHFTokenizer builds a Tokenizer from the contents of a Qwen2/Qwen3
// tokenizer.json (BPE) and tokenizer_config.json. vocabSize is the model's
// embedding rows (Qwen3's config.json says 151,936, more than the 151,669
// tokens the tokenizer defines); 0 keeps the tokenizer's own count.
//
// Token types follow llama.cpp's converter: vocabulary entries are normal;
// added tokens that are special, or spelled <|...|>, are control tokens
// (never produced from plain text by the tokenizer unless special tokens are
// parsed); other added tokens (<think>, <tool_call>) are user-defined.
// Without a bos_token (Qwen has none) BOS is the pad token, and AddBOS is
// false: llama.cpp's gpt2 default BOS (id 11) would otherwise be used.
func LoadHFTokenizer(tokenizerJSON, configJSON []byte, vocabSize int) (*Tokenizer, error) {
	var tj hfTokenizerJSON
	if err := json.Unmarshal(tokenizerJSON, &tj); err != nil {
		return nil, fmt.Errorf("gguf: tokenizer.json: %w", err)
	}
	var cj hfConfigJSON
	if err := json.Unmarshal(configJSON, &cj); err != nil {
		return nil, fmt.Errorf("gguf: tokenizer_config.json: %w", err)
	}
	if tj.Model.Type != "BPE" {
		return nil, fmt.Errorf("gguf: tokenizer model %q, want BPE", tj.Model.Type)
	}
	if len(tj.Model.Vocab) == 0 {
		return nil, errors.New("gguf: tokenizer.json has no vocabulary")
	}
	if !hasQwen2Split(tj) {
		return nil, errors.New("gguf: the pre-tokenizer is not Qwen2's split pattern; llama.cpp would tokenize differently")
	}

	n := 0
	for _, id := range tj.Model.Vocab {
		n = max(n, id+1)
	}
	for _, a := range tj.AddedTokens {
		n = max(n, a.ID+1)
	}
	if n > maxArray {
		return nil, fmt.Errorf("gguf: %d tokens", n)
	}
	if vocabSize == 0 {
		vocabSize = n
	}
	if vocabSize < n {
		return nil, fmt.Errorf("gguf: vocab size %d is smaller than the tokenizer's %d tokens", vocabSize, n)
	}
	t := &Tokenizer{Model: "gpt2", Pre: "qwen2", Tokens: make([]string, vocabSize), Types: make([]int32, vocabSize),
		AddBOS: cj.AddBOS, Added: len(tj.AddedTokens)}
	set := make([]bool, vocabSize)
	put := func(id int, s string, typ int32) error {
		if id < 0 {
			return fmt.Errorf("gguf: token %q has id %d", s, id)
		}
		if set[id] && t.Tokens[id] != s {
			return fmt.Errorf("gguf: id %d is both %q and %q", id, t.Tokens[id], s)
		}
		t.Tokens[id], t.Types[id], set[id] = s, typ, true
		return nil
	}
	for s, id := range tj.Model.Vocab {
		if err := put(id, s, TokenNormal); err != nil {
			return nil, err
		}
	}
	for _, a := range tj.AddedTokens {
		typ := TokenUserDefined
		if a.Special || (strings.HasPrefix(a.Content, "<|") && strings.HasSuffix(a.Content, "|>")) {
			typ = TokenControl
		}
		if err := put(a.ID, a.Content, typ); err != nil {
			return nil, err
		}
	}
	for id := range t.Tokens {
		if !set[id] {
			if id < n {
				return nil, fmt.Errorf("gguf: token id %d is missing from the tokenizer", id)
			}
			t.Tokens[id], t.Types[id] = fmt.Sprintf("[PAD%d]", id), TokenUnused
		}
	}

	t.Merges = make([]string, 0, len(tj.Model.Merges))
	for i, raw := range tj.Model.Merges {
		m, err := mergeString(raw)
		if err != nil {
			return nil, fmt.Errorf("gguf: merge %d: %w", i, err)
		}
		t.Merges = append(t.Merges, m)
	}

	if err := json.Unmarshal(cj.ChatTemplate, &t.ChatTemplate); err != nil || t.ChatTemplate == "" {
		return nil, errors.New("gguf: tokenizer_config.json has no chat_template string")
	}
	ids := map[string]int{}
	for id, s := range t.Tokens {
		if t.Types[id] != TokenNormal {
			ids[s] = id
		}
	}
	lookup := func(field string, raw json.RawMessage) (int, error) {
		s, ok, err := tokenName(raw)
		if err != nil || !ok {
			return -1, err
		}
		id, found := ids[s]
		if !found {
			return -1, fmt.Errorf("gguf: %s %q is not an added token", field, s)
		}
		return id, nil
	}
	var err error
	if t.EOS, err = lookup("eos_token", cj.EOS); err != nil {
		return nil, err
	}
	if t.EOS < 0 {
		return nil, errors.New("gguf: tokenizer_config.json has no eos_token")
	}
	if t.PAD, err = lookup("pad_token", cj.PAD); err != nil {
		return nil, err
	}
	if t.BOS, err = lookup("bos_token", cj.BOS); err != nil {
		return nil, err
	}
	if t.BOS < 0 {
		t.BOS = t.PAD
	}
	return t, nil
}

// hasQwen2Split reports whether the pre-tokenizer splits with Qwen2's
// pattern (alone or first in a sequence with the byte-level step).
func hasQwen2Split(tj hfTokenizerJSON) bool {
	for _, p := range tj.PreTokenizer.PreTokenizers {
		if p.Type == "Split" {
			return p.Pattern.Regex == Qwen2PreTokenizerRegex
		}
	}
	return false
}

// mergeString returns a merge as "left right", from either of
// tokenizer.json's spellings: the string itself or a [left, right] pair.
func mergeString(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if strings.Count(s, " ") != 1 {
			return "", fmt.Errorf("%q is not two tokens", s)
		}
		return s, nil
	}
	var pair []string
	if err := json.Unmarshal(raw, &pair); err != nil || len(pair) != 2 {
		return "", fmt.Errorf("%s is neither \"a b\" nor [a, b]", raw)
	}
	if strings.Contains(pair[0], " ") || strings.Contains(pair[1], " ") {
		// llama.cpp splits merges at the space: a token containing one
		// cannot be written (byte-level BPE spells a space as Ġ).
		return "", fmt.Errorf("merge %q has a space inside a token", pair)
	}
	return pair[0] + " " + pair[1], nil
}

// tokenName reads a special-token field of tokenizer_config.json: null, a
// string, or an object with "content".
func tokenName(raw json.RawMessage) (string, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", false, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, s != "", nil
	}
	var o struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", false, fmt.Errorf("gguf: special token %s: %w", raw, err)
	}
	return o.Content, o.Content != "", nil
}
