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
		sum, err := resolveKey(repl, k)
		if err != nil {
			return fmt.Errorf("api_keys[%d]: %v", i, err)
		}
		h.keyHashes = append(h.keyHashes, sum)
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

// resolveKey resolves the placeholders in one configured key (a tenant's
// too) and returns its SHA-256 hash, the only form in which keys are kept.
func resolveKey(repl *caddy.Replacer, k string) ([32]byte, error) {
	v, err := repl.ReplaceOrErr(k, true, true)
	if err != nil {
		return [32]byte{}, err
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return [32]byte{}, fmt.Errorf("empty after placeholders were resolved")
	}
	return sha256.Sum256([]byte(v)), nil
}

// authorized reports whether r carries one of the configured keys, as a
// Bearer token or in X-Api-Key, and which (its index in keyHashes, which
// names its tenant). Both sides are hashed to a fixed length, every key is
// compared and the index is selected in constant time, so neither a key's
// length nor which key matched shows in the timing. No key is configured
// twice (provisionTenants), so at most one matches.
func (h *LLMRoute) authorized(r *http.Request) (int, bool) {
	tok, ok := bearerToken(r.Header.Get("Authorization"))
	if !ok {
		tok = r.Header.Get("X-Api-Key")
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return -1, false
	}
	sum := sha256.Sum256([]byte(tok))
	found := 0 // index+1 of the matching key
	for i := range h.keyHashes {
		found = subtle.ConstantTimeSelect(subtle.ConstantTimeCompare(sum[:], h.keyHashes[i][:]), i+1, found)
	}
	return found - 1, found > 0
}

// bearerToken returns the token of an Authorization value in the Bearer
// scheme. The scheme is case-insensitive (RFC 9110, 11.1) and may be
// followed by spaces or tabs.
func bearerToken(v string) (string, bool) {
	v = strings.TrimLeft(v, " \t")
	i := strings.IndexAny(v, " \t")
	if i < 0 || !strings.EqualFold(v[:i], "Bearer") {
		return "", false
	}
	return strings.Trim(v[i:], " \t"), true
}

// credentialParams are query parameters that carry API keys in some
// clients (Gemini's ?key=, Azure's api-key, ?api_key=). llm_route never
// forwards them; the access log is written from a copy of the request
// made before any handler runs, so Caddyfile.example filters them there.
var credentialParams = []string{"api_key", "api-key", "apikey", "key", "access_token"}

// stripCredentials removes credential parameters from the request's query
// (in place, so that every later view of the URL lacks them) and the
// credential headers the replicas must not see.
func stripCredentials(r *http.Request) {
	r.Header.Del("Authorization")
	r.Header.Del("X-Api-Key")
	r.Header.Del("Api-Key")
	if r.URL.RawQuery == "" {
		return
	}
	q := r.URL.Query()
	found := false
	for k := range q {
		for _, c := range credentialParams {
			if strings.EqualFold(k, c) {
				q.Del(k)
				found = true
			}
		}
	}
	if !found {
		return
	}
	r.URL.RawQuery = q.Encode()
	r.RequestURI = r.URL.RequestURI()
}
