// Package netx holds the loopback plumbing of llmroute's tests and tools:
// a free port to give a child process, and waiting until something
// listens or answers there.
package netx

import (
	"net"
	"strconv"
)

// FreeAddr returns 127.0.0.1:<port> of a port that was free a moment ago
// (the kernel picked it for a listener, closed again at once). Another
// process may take it before the caller does; the callers start their
// child on it right away.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// FreePort is FreeAddr's port as a number, for configurations that take
// one.
func FreePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(p)
}
