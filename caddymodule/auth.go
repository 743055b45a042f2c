package caddymodule

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// resolveKeys resolves the placeholders in the configured keys and keeps
// only their SHA-256 hashes.
func (h *LLMRoute) resolveKeys(repl *caddy.Replacer) error {
	h.keyHashes = h.keyHashes[:0]
	for i, k := range h.APIKeys {
		v, err := repl.ReplaceOrErr(k, true, true)
		if err != nil {
			return fmt.Errorf("api_keys[%d]: %v", i, err)
		}
		v = strings.TrimSpace(v)
		if v == "" {
			return fmt.Errorf("api_keys[%d] is empty after placeholders were resolved", i)
		}
		h.keyHashes = append(h.keyHashes, sha256.Sum256([]byte(v)))
	}
	if h.UpstreamAPIKey != "" {
		v, err := repl.ReplaceOrErr(h.UpstreamAPIKey, true, true)
		if err != nil {
			return fmt.Errorf("upstream_api_key: %v", err)
		}
		h.upstream = strings.TrimSpace(v)
	}
	return nil
}

// authorized reports whether r carries one of the configured keys. Both
// sides are hashed to a fixed length and every key is compared, so neither
// a key's length nor which key matched shows in the timing.
func (h *LLMRoute) authorized(r *http.Request) bool {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		tok = r.Header.Get("X-Api-Key")
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	match := 0
	for i := range h.keyHashes {
		match |= subtle.ConstantTimeCompare(sum[:], h.keyHashes[i][:])
	}
	return match == 1
}
