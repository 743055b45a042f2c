package sse

// Tail remembers the last bytes written to it, enough to tell whether a
// stream ended with DoneEvent, without parsing or keeping the stream: for
// a load generator that reads answers into a fixed buffer and must spend
// as little CPU as possible on each (the proxy-cost bench). The zero value
// is ready to use.
type Tail struct {
	b [len(DoneEvent)]byte
	n int
}

// Write records the end of p; it never fails.
func (t *Tail) Write(p []byte) (int, error) {
	if len(p) >= len(t.b) {
		t.n = copy(t.b[:], p[len(p)-len(t.b):])
		return len(p), nil
	}
	keep := min(t.n, len(t.b)-len(p))
	copy(t.b[:], t.b[t.n-keep:t.n])
	t.n = keep + copy(t.b[keep:], p)
	return len(p), nil
}

// EndsWithDone reports whether what was written ends with DoneEvent.
func (t *Tail) EndsWithDone() bool {
	return t.n == len(DoneEvent) && string(t.b[:t.n]) == DoneEvent
}
