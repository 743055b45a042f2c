//go:build linux

package fakereplica

import (
	"net"
	"syscall"
	"time"
	"unsafe"
)

// drainSendQueue waits (up to limit) until everything written on conn was
// acknowledged by the peer (SIOCOUTQ = 0), so that a reset sent next
// cannot overtake data still in flight.
func drainSendQueue(conn *net.TCPConn, limit time.Duration) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var n int32
		var errno syscall.Errno
		_ = raw.Control(func(fd uintptr) {
			_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n)))
		})
		if errno != 0 || n == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}
