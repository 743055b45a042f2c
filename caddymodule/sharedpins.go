package caddymodule

import (
	"strconv"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Response and conversation pins in the shared store. A /v1/responses
// answer's id is written to the store, with the request's conversation,
// as soon as it streams by (before the client can name it in a
// follow-up), with the local table's TTL; a follow-up whose pin this
// instance does not hold reads it from the store (one MGET for the
// response and the conversation) and keeps it locally. A store that does
// not answer leaves the follow-up with what this instance knows: pinned
// when it made the response, else placed as a new request.

// pinStoreKey is a pin's key in the store: ids are the client's, of any
// length, so the store holds their hash.
func (s *sharedStore) pinStoreKey(k string) string {
	return s.prefix + "pin:" + strconv.FormatUint(xxhash.Sum64String(k), 16)
}

// pinKeys returns the local keys of the state req continues, in the
// order stateHome looks them up.
func pinKeys(req *policies.Request) []string {
	var out []string
	for _, k := range []string{stateKey("r:", req.PreviousResponseID), stateKey("c:", req.Conversation)} {
		if k != "" {
			out = append(out, k)
		}
	}
	return out
}

// pinOf reads from the store the replica holding the state req continues
// (a local miss); it caches what it found in the local table.
func (s *sharedStore) pinOf(req *policies.Request) (addr, key string) {
	if req == nil {
		return "", ""
	}
	keys := pinKeys(req)
	if len(keys) == 0 {
		return "", ""
	}
	if !s.c.available() {
		metricStoreFallbacks.WithLabelValues("pins").Inc()
		return "", ""
	}
	skeys := make([]string, len(keys))
	for i, k := range keys {
		skeys[i] = s.pinStoreKey(k)
	}
	ctx, cancel := s.c.ctx()
	defer cancel()
	vals, err := s.c.rdb.MGet(ctx, skeys...).Result()
	if !s.c.done("pin_get", err) {
		metricStoreFallbacks.WithLabelValues("pins").Inc()
		return "", ""
	}
	for i, v := range vals {
		if a, ok := v.(string); ok && a != "" {
			stateHomes.Add(keys[i], a)
			return a, keys[i]
		}
	}
	return "", ""
}

// sharePin writes to the store that the replica at addr made response id
// and holds req's conversation.
func (s *sharedStore) sharePin(addr, id string, req *policies.Request) {
	if !s.c.available() {
		metricStoreFallbacks.WithLabelValues("pins").Inc()
		return
	}
	ctx, cancel := s.c.ctx()
	defer cancel()
	_, err := s.c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.pinStoreKey(stateKey("r:", id)), addr, responseTTL)
		if req != nil && req.Conversation != "" {
			p.Set(ctx, s.pinStoreKey(stateKey("c:", req.Conversation)), addr, responseTTL)
		}
		return nil
	})
	if !s.c.done("pin_set", err) {
		metricStoreFallbacks.WithLabelValues("pins").Inc()
	}
}

// shareResponseID is the routeWriter's hook: the answer's id was read.
func shareResponseID(rc *routeCtx, id string) {
	if rc.shared == nil || id == "" {
		return
	}
	if a := rc.current(); a != nil {
		rc.shared.sharePin(a.rep.addr, id, rc.req)
	}
}
