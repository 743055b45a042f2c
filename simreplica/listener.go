package simreplica

import (
	"net"
	"sync"
)

// switchListener wraps a TCP listener so that the server can stop
// listening for a while (new connections are refused by the kernel, as by
// a dead replica) and listen again on the same address later.
type switchListener struct {
	addr net.Addr

	mu      sync.Mutex
	cur     net.Listener  // nil while refusing
	closed  bool          // Close was called
	changed chan struct{} // closed (and replaced) at every state change
}

func newSwitchListener(ln net.Listener) *switchListener {
	return &switchListener{addr: ln.Addr(), cur: ln, changed: make(chan struct{})}
}

// signalLocked wakes every Accept waiting for a state change.
func (l *switchListener) signalLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Accept waits for a connection while listening, and across refusal
// periods; it fails only once the listener is closed or on a real error.
func (l *switchListener) Accept() (net.Conn, error) {
	for {
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			return nil, net.ErrClosed
		}
		cur, changed := l.cur, l.changed
		l.mu.Unlock()
		if cur == nil {
			<-changed
			continue
		}
		c, err := cur.Accept()
		if err == nil {
			return c, nil
		}
		l.mu.Lock()
		stale := l.closed || l.cur != cur
		l.mu.Unlock()
		if !stale {
			return nil, err
		}
	}
}

// refuse closes the underlying listener until listen is called.
func (l *switchListener) refuse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.cur == nil {
		return
	}
	_ = l.cur.Close()
	l.cur = nil
	l.signalLocked()
}

// listen listens again on the original address after refuse.
func (l *switchListener) listen() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.cur != nil {
		return nil
	}
	ln, err := net.Listen(l.addr.Network(), l.addr.String())
	if err != nil {
		return err
	}
	l.cur = ln
	l.signalLocked()
	return nil
}

// Close closes the listener for good.
func (l *switchListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	var err error
	if l.cur != nil {
		err = l.cur.Close()
		l.cur = nil
	}
	l.signalLocked()
	return err
}

// Addr is the address the listener serves (kept while refusing).
func (l *switchListener) Addr() net.Addr { return l.addr }
