package policies

// arena hands out slices of one backing array, for the fast paths'
// values that do not outlive a parse (an agent's body converts into
// hundreds of messages and parts): once grown to a body's needs it is
// reused from a pool, and a parse allocates none. A nil arena allocates
// each slice (the general path).
type arena[T any] struct{ buf []T }

// take returns an empty slice with room for exactly n values. When the
// array is full a larger one replaces it; the slices already handed out
// keep the old one.
func (a *arena[T]) take(n int) []T {
	if a == nil {
		return make([]T, 0, n)
	}
	if cap(a.buf)-len(a.buf) < n {
		a.buf = make([]T, 0, max(2*cap(a.buf), n, 16))
	}
	at := len(a.buf)
	a.buf = a.buf[:at+n]
	return a.buf[at : at : at+n]
}

// reset clears what a handed out (it must not keep a body alive) for the
// next parse, and reports whether a is small enough to keep.
func (a *arena[T]) reset(maxCap int) bool {
	clear(a.buf)
	a.buf = a.buf[:0]
	return cap(a.buf) <= maxCap
}

// convBufs are the arenas of the conversion of an Anthropic body into
// chat messages (chatOfMessages); nil: none.
type convBufs struct {
	msgs  arena[chatMessage]
	parts arena[contentPart]
	calls arena[toolCall]
}

func (cb *convBufs) msgArena() *arena[chatMessage] {
	if cb == nil {
		return nil
	}
	return &cb.msgs
}

func (cb *convBufs) partArena() *arena[contentPart] {
	if cb == nil {
		return nil
	}
	return &cb.parts
}

func (cb *convBufs) callArena() *arena[toolCall] {
	if cb == nil {
		return nil
	}
	return &cb.calls
}

// reset resets every arena and reports whether all are worth keeping.
func (cb *convBufs) reset() bool {
	m, p, c := cb.msgs.reset(4096), cb.parts.reset(4096), cb.calls.reset(4096)
	return m && p && c
}
