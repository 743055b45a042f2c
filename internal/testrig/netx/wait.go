package netx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// PollInterval is how long WaitTCP and WaitHTTP wait between tries.
const PollInterval = 50 * time.Millisecond

// ErrExited is returned by WaitTCP and WaitHTTP when the process that was
// to listen ended first (its exited channel closed).
var ErrExited = errors.New("the process exited before it answered")

// WaitTCP dials addr every PollInterval (each dial bounded by 200 ms) until
// a connection succeeds, ctx ends, or exited (nil for none: a process's
// Done channel) is closed. It returns nil once addr accepted a connection;
// otherwise ErrExited, or an error that wraps ctx's and says what the last
// dial got.
func WaitTCP(ctx context.Context, addr string, exited <-chan struct{}) error {
	d := net.Dialer{Timeout: 200 * time.Millisecond}
	return poll(ctx, exited, func() error {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}, func(last error) error {
		return fmt.Errorf("%s did not accept a connection: %w (last: %v)", addr, ctx.Err(), last)
	})
}

// WaitHTTP GETs url every PollInterval until it answers 200 OK, ctx ends,
// or exited (nil for none) is closed. hc nil means a client with a 1 s
// timeout. It returns nil once url answered 200; otherwise ErrExited, or an
// error that wraps ctx's and says what the last try got.
func WaitHTTP(ctx context.Context, hc *http.Client, url string, exited <-chan struct{}) error {
	if hc == nil {
		hc = &http.Client{Timeout: time.Second}
	}
	return poll(ctx, exited, func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}, func(last error) error {
		return fmt.Errorf("%s did not answer 200: %w (last: %v)", url, ctx.Err(), last)
	})
}

// poll runs try until it succeeds, exited closes or ctx ends.
func poll(ctx context.Context, exited <-chan struct{}, try func() error, timeout func(last error) error) error {
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-exited:
			return ErrExited
		case <-ctx.Done():
			return timeout(last)
		case <-t.C:
		}
		if last = try(); last == nil {
			return nil
		}
		t.Reset(PollInterval)
	}
}
