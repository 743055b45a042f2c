package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the logger and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-addr", "127.0.0.1:0", "-name", "demo-a", "-blocks", "128", "-speed", "50", "-output-tokens", "4"}, &logs, ready)
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run ended early: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("not ready")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
	defer client.Transport.(*http.Transport).CloseIdleConnections()

	resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"x","messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, string(body))
	assert.Equal(t, "demo-a", resp.Header.Get("X-Sim-Replica"))
	assert.Contains(t, string(body), `"completion_tokens":4`)

	resp, err = client.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Contains(t, string(body), `num_gpu_blocks="128"`)

	cancel()
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("run did not stop")
	}
	assert.Contains(t, logs.String(), "simreplica demo-a listening on http://"+addr)
}

func TestRunRejectsBadFlags(t *testing.T) {
	var logs syncBuffer
	ctx := context.Background()
	assert.Error(t, run(ctx, []string{"-fault", "explode", "-addr", "127.0.0.1:0"}, &logs, nil))
	assert.Error(t, run(ctx, []string{"-blocks", "-3", "-addr", "127.0.0.1:0"}, &logs, nil))
	assert.Error(t, run(ctx, []string{"-nope"}, &logs, nil))
	assert.Error(t, run(ctx, []string{"-addr", "127.0.0.1:0", "extra"}, &logs, nil))
}
