package netx

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestFreeAddrIsLoopbackAndListenable(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(addr, "127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("FreeAddr = %q, want 127.0.0.1:<port>", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on the free address: %v", err)
	}
	ln.Close()
	p, err := FreePort()
	if err != nil || p <= 0 || p > 65535 {
		t.Fatalf("FreePort = %d, %v", p, err)
	}
}

// TestFreePortNeverRepeats plays a kernel that offers the same port twice
// in a row: the second caller must get another one.
func TestFreePortNeverRepeats(t *testing.T) {
	offers := []int{40001, 40001, 40001, 40002}
	saved := kernelPort
	t.Cleanup(func() { kernelPort = saved })
	kernelPort = func() (int, error) {
		p := offers[0]
		if len(offers) > 1 {
			offers = offers[1:]
		}
		return p, nil
	}
	first, err := FreePort()
	if err != nil || first != 40001 {
		t.Fatalf("first FreePort = %d, %v; want 40001", first, err)
	}
	second, err := FreePort()
	if err != nil || second != 40002 {
		t.Fatalf("second FreePort = %d, %v; want 40002 (40001 was handed out)", second, err)
	}
	if _, err := FreePort(); err == nil {
		t.Fatal("a kernel offering only handed-out ports must end in an error, not a repeat")
	}
}

func TestWaitTCP(t *testing.T) {
	closed := make(chan struct{})
	close(closed)
	for _, tc := range []struct {
		name     string
		listenIn time.Duration // -1: never
		exited   <-chan struct{}
		wantErr  error // nil: success
	}{
		{name: "already listening", listenIn: 0},
		{name: "listens later", listenIn: 150 * time.Millisecond},
		{name: "never listens", listenIn: -1, wantErr: context.DeadlineExceeded},
		{name: "process exited", listenIn: -1, exited: closed, wantErr: ErrExited},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, err := FreeAddr()
			if err != nil {
				t.Fatal(err)
			}
			if tc.listenIn >= 0 {
				lns := make(chan net.Listener, 1)
				go func() {
					time.Sleep(tc.listenIn)
					ln, err := net.Listen("tcp", addr)
					if err != nil {
						lns <- nil
						return
					}
					lns <- ln
					for {
						c, err := ln.Accept()
						if err != nil {
							return
						}
						c.Close()
					}
				}()
				defer func() {
					if ln := <-lns; ln != nil {
						ln.Close()
					}
				}()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if tc.wantErr == context.DeadlineExceeded {
				ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			err = WaitTCP(ctx, addr, tc.exited)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("WaitTCP = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestWaitHTTP(t *testing.T) {
	for _, tc := range []struct {
		name    string
		okAfter int32 // answers 503 this many times, then 200; -1: never 200
		wantErr bool
	}{
		{name: "ok at once", okAfter: 0},
		{name: "ok after two 503s", okAfter: 2},
		{name: "never ok", okAfter: -1, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if k := n.Add(1) - 1; tc.okAfter < 0 || k < tc.okAfter {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.WriteHeader(http.StatusOK)
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			err := WaitHTTP(ctx, nil, srv.URL+"/health", nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("WaitHTTP = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr && (!errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "503")) {
				t.Fatalf("WaitHTTP error %q should wrap the deadline and name the last status", err)
			}
			if !tc.wantErr && n.Load() != tc.okAfter+1 {
				t.Fatalf("%d tries, want %d", n.Load(), tc.okAfter+1)
			}
		})
	}
}
