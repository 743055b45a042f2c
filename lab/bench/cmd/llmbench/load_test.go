package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestDoOne(t *testing.T) {
	up := newTestUpstream(t)
	// cut answers a stream that stops before [DONE].
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, string(chunkContent)+string(chunkFinish))
	}))
	defer cut.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer failing.Close()
	stream := []byte(`{"model":"m","stream":true,"messages":[]}`)
	for _, tc := range []struct {
		name    string
		url     string
		body    []byte
		wantErr bool
		bad     bool // errBadAnswer
	}{
		{name: "stream", url: up.URL, body: stream},
		{name: "json", url: up.URL, body: []byte(`{"model":"m","messages":[]}`)},
		{name: "stream without done", url: cut.URL, body: stream, wantErr: true, bad: true},
		{name: "error status", url: failing.URL, body: stream, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// A small buffer: the answer arrives over several reads.
			ttfb, n, err := doOne(ctx, newClient(1), tc.url, tc.body, nil, make([]byte, 7))
			if (err != nil) != tc.wantErr || errors.Is(err, errBadAnswer) != tc.bad {
				t.Fatalf("doOne error %v, want error %v (bad answer %v)", err, tc.wantErr, tc.bad)
			}
			if !tc.wantErr && (ttfb <= 0 || n == 0) {
				t.Fatalf("ttfb %v, %d bytes", ttfb, n)
			}
		})
	}
}

func TestPhasePercentiles(t *testing.T) {
	p := phaseResult{ttfb: []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond}}
	if got := p.pct(.5); got != 2.5 {
		t.Fatalf("p50 = %v, want 2.5 (linear interpolation)", got)
	}
	if got := (&phaseResult{}).pct(.99); got != 0 {
		t.Fatalf("p99 of no samples = %v, want 0", got)
	}
}
