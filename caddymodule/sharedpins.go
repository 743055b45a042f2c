package caddymodule

import (
	"strconv"

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

// pinStoreKey is a pin's key in the store: the local key, the hash of the
// whole id and its kind (stateKey), since ids are the client's and of any
// length.
func (s *sharedStore) pinStoreKey(k uint64) string {
	return s.prefix + "pin:" + strconv.FormatUint(k, 16)
}

// pinKeys returns the local keys of the state req continues, in the
// order stateHome looks them up.
func pinKeys(req *policies.Request) []uint64 {
	var out []uint64
	for _, k := range [2]uint64{stateKey(stateResponse, req.PreviousResponseID), stateKey(stateConversation, req.Conversation)} {
		if k != 0 {
			out = append(out, k)
		}
	}
	return out
}

// pinOf reads from the store the replica holding the state req continues
// (a local miss); it caches what it found in the local table.
func (s *sharedStore) pinOf(req *policies.Request) (addr string, key uint64) {
	if req == nil {
		return "", 0
	}
	keys := pinKeys(req)
	if len(keys) == 0 {
		return "", 0
	}
	if !s.c.available() {
		metricStoreFallbacks.WithLabelValues("pins").Inc()
		return "", 0
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
		return "", 0
	}
	for i, v := range vals {
		if a, ok := v.(string); ok && a != "" {
			stateHomes.Add(keys[i], a)
			return a, keys[i]
		}
	}
	return "", 0
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
		p.Set(ctx, s.pinStoreKey(stateKey(stateResponse, id)), addr, responseTTL)
		if req != nil && req.Conversation != "" {
			p.Set(ctx, s.pinStoreKey(stateKey(stateConversation, req.Conversation)), addr, responseTTL)
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
