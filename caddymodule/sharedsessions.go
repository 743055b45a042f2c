package caddymodule

import (
	"strconv"
)

// Session homes in the shared store. A session's home is where its latest
// request was sent; every instance computes the same rendezvous home for
// a new session, so instances disagree only once a session has moved
// (its home full, cooling or gone). With a shared store the instance
// that binds a session writes its home to the store (off the request's
// path), and an instance reads it (one GET) before routing each request
// of a session, so that a session moved through one instance is followed
// through every other. A store that does not answer leaves the instance
// with its own table.

// maxSessionWrites bounds the session writes out at once; past it a
// write is dropped (the session's home stays this instance's own).
const maxSessionWrites = 64

func (s *sharedStore) sessionStoreKey(key uint64) string {
	return s.prefix + "session:" + strconv.FormatUint(key, 16)
}

// sessionHome reads the session's home from the store into the local
// table (describe).
func (s *sharedStore) sessionHome(key uint64) {
	if !s.c.available() {
		metricStoreFallbacks.WithLabelValues("sessions").Inc()
		return
	}
	ctx, cancel := s.c.ctx()
	defer cancel()
	addr, err := s.c.rdb.Get(ctx, s.sessionStoreKey(key)).Result()
	if !s.c.done("session_get", err) {
		metricStoreFallbacks.WithLabelValues("sessions").Inc()
		return
	}
	if err == nil && addr != "" {
		sessionHomes.Add(key, addr)
	}
}

// shareSession writes that the session's home is addr, in a goroutine
// of its own (the selection must not wait for the store).
func (s *sharedStore) shareSession(key uint64, addr string) {
	if !s.c.available() {
		metricStoreFallbacks.WithLabelValues("sessions").Inc()
		return
	}
	select {
	case s.sessionWrites <- struct{}{}:
	default:
		metricStoreFallbacks.WithLabelValues("sessions").Inc()
		return
	}
	go func() {
		defer func() { <-s.sessionWrites }()
		ctx, cancel := s.c.ctx()
		defer cancel()
		if !s.c.done("session_set", s.c.rdb.Set(ctx, s.sessionStoreKey(key), addr, sessionTTL).Err()) {
			metricStoreFallbacks.WithLabelValues("sessions").Inc()
		}
	}()
}
