package caddyproc

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
)

// TestStartCaddyReportsAnEarlyExit starts a "caddy" that fails at once:
// StartCaddy must say so with the log, not wait out its timeout.
func TestStartCaddyReportsAnEarlyExit(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("needs a shell script")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "fakecaddy")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho \"Error: adapting config: bad directive\" >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	admin, _ := netx.FreeAddr()
	listen, _ := netx.FreeAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	c, err := StartCaddy(ctx, bin, dir, "{}", admin, listen)
	if err == nil {
		c.Stop()
		t.Fatal("StartCaddy succeeded with a binary that exits")
	}
	if !strings.Contains(err.Error(), "caddy exited") || !strings.Contains(err.Error(), "bad directive") {
		t.Fatalf("error %q should say caddy exited and quote its log", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("StartCaddy took %v to notice the exit", time.Since(start))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "Caddyfile")); err != nil || string(b) != "{}" {
		t.Fatalf("Caddyfile written as %q, %v", b, err)
	}
}
