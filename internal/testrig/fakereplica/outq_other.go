//go:build !linux

package fakereplica

import (
	"net"
	"time"
)

// drainSendQueue is a no-op where SIOCOUTQ is not available.
func drainSendQueue(*net.TCPConn, time.Duration) {}
