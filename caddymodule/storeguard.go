package caddymodule

import (
	"errors"
	"net"
)

// The store's replies are bounded before the client parses them. go-redis
// reads a reply line until its end however long it is, and allocates what
// a length header announces ($<n> bulk strings, *<n> arrays) before the
// bytes arrive, so a store that sends an endless line or a huge length
// would grow the gateway's memory without bound. guardedConn sits under
// the client, in its dialer: it counts the bytes read since the client
// last wrote (one command or pipeline: a reply window) and follows the
// RESP framing of what it passes, so that it fails the read, and the
// client drops the connection, when a window, a line or an announced
// length passes what this gateway's commands can be answered with. The
// replies it expects are replica addresses, counters and short arrays.

const (
	// maxReplyWindow bounds the bytes read for one command or pipeline.
	maxReplyWindow = 1 << 20
	// maxReplyLine bounds a line (a status, an error, a length header).
	maxReplyLine = 64 << 10
	// maxReplyElems bounds an announced aggregate's element count.
	maxReplyElems = 1 << 16
)

var errReplyTooLarge = errors.New("shared store: reply over the gateway's bound")

// guardedConn is a net.Conn whose reads are bounded as above.
type guardedConn struct {
	net.Conn
	window int // bytes left in this reply window
	// RESP framing of the bytes read so far.
	payload int  // bytes of a bulk payload (with its CRLF) still to pass
	inLine  bool // inside a line: a header or a simple reply
	kind    byte // the line's type byte
	lineLen int
	num     int64 // the header's length so far
	neg     bool
	digits  bool
}

func newGuardedConn(c net.Conn) *guardedConn { return &guardedConn{Conn: c, window: maxReplyWindow} }

// Write starts a new reply window: the client reads only to answer what it
// wrote.
func (c *guardedConn) Write(b []byte) (int, error) {
	c.window = maxReplyWindow
	return c.Conn.Write(b)
}

func (c *guardedConn) Read(b []byte) (int, error) {
	if c.window <= 0 {
		return 0, errReplyTooLarge
	}
	if len(b) > c.window {
		b = b[:c.window]
	}
	n, err := c.Conn.Read(b)
	c.window -= n
	if ferr := c.follow(b[:n]); ferr != nil {
		return 0, ferr
	}
	return n, err
}

// follow checks the RESP framing of b, the next bytes read.
func (c *guardedConn) follow(b []byte) error {
	for i := 0; i < len(b); i++ {
		if c.payload > 0 {
			skip := min(c.payload, len(b)-i)
			c.payload -= skip
			i += skip - 1
			continue
		}
		ch := b[i]
		if !c.inLine {
			c.inLine, c.kind, c.lineLen, c.num, c.neg, c.digits = true, ch, 0, 0, false, false
			continue
		}
		c.lineLen++
		if c.lineLen > maxReplyLine {
			return errReplyTooLarge
		}
		if ch == '\n' {
			c.inLine = false
			if err := c.header(); err != nil {
				return err
			}
			continue
		}
		if !hasLength(c.kind) {
			continue
		}
		switch {
		case ch >= '0' && ch <= '9':
			c.num = c.num*10 + int64(ch-'0')
			c.digits = true
			if c.num > maxReplyWindow {
				return errReplyTooLarge
			}
		case ch == '-' && c.lineLen == 1:
			c.neg = true
		}
	}
	return nil
}

// header applies a finished line's announced length.
func (c *guardedConn) header() error {
	if !hasLength(c.kind) || !c.digits || c.neg {
		return nil
	}
	switch c.kind {
	case '$', '=', '!': // bulk string, verbatim string, bulk error
		c.payload = int(c.num) + 2
	default: // aggregates: their elements are lines of their own
		if c.num > maxReplyElems {
			return errReplyTooLarge
		}
	}
	return nil
}

// hasLength reports whether a RESP type's line is a length header.
func hasLength(kind byte) bool {
	switch kind {
	case '$', '=', '!', '*', '%', '~', '>', '|':
		return true
	}
	return false
}
