package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/internal/testrig/proc"
)

// haproxyPolicy is HAProxy in place of caddy: consistent hashing of the
// body's first HashBytes bytes bounded by hash-balance-factor 125, what a
// user of a plain load balancer configures for cache affinity today. The
// simulator's equivalent is its bounded_hash on the same bytes.
var haproxyPolicy = Policy{Name: "haproxy bounded body hash", Strategy: "bounded_hash", HAProxy: true}

// haproxyHashBytes is how many leading body bytes HAProxy hashes: the
// workload's bounded_hash key (workload.Params.HashBytes' default).
const haproxyHashBytes = 256

// haproxyBinary returns haproxy on PATH, or "".
func haproxyBinary() string {
	p, _ := exec.LookPath("haproxy")
	return p
}

// haproxyConfig is the HAProxy (>= 2.6: balance hash <expr>) equivalent of
// the e2e Caddyfile: the same per-replica cap (maxconn, with HAProxy's
// queue beyond it), the same timeouts, and the answering replica in the
// replica header.
func haproxyConfig(listen string, upstreams []string, cap int) string {
	var servers strings.Builder
	for i, u := range upstreams {
		fmt.Fprintf(&servers, "\tserver r%d %s maxconn %d\n", i, u, cap)
	}
	return fmt.Sprintf(`global
	maxconn 8000
	log stderr format raw local0 err

defaults
	mode http
	timeout connect 2s
	timeout client 60s
	timeout server 60s
	timeout queue 30s
	timeout http-request 30s
	option http-buffer-request

frontend fe
	bind %s
	default_backend be

backend be
	balance hash req.body,bytes(0,%d)
	hash-type consistent
	hash-balance-factor 125
	http-response set-header %s %%[srv_name]
%s`, listen, haproxyHashBytes, replicaHeader, servers.String())
}

// startHAProxy starts an HAProxy in front of upstreams and returns it and
// the chat URL it serves.
func startHAProxy(tmp string, k int, upstreams []string, cap int, progress io.Writer) (*proc.Proc, string, error) {
	bin := haproxyBinary()
	if bin == "" {
		return nil, "", fmt.Errorf("e2e: policy %q needs haproxy on PATH", haproxyPolicy.Name)
	}
	addr, err := netx.FreeAddr()
	if err != nil {
		return nil, "", err
	}
	path := filepath.Join(tmp, fmt.Sprintf("haproxy.%d.cfg", k))
	if err := os.WriteFile(path, []byte(haproxyConfig(addr, upstreams, cap)), 0o644); err != nil {
		return nil, "", err
	}
	cmd := exec.Command(bin, "-db", "-f", path)
	cmd.Stdout, cmd.Stderr = io.Discard, progress
	p, err := proc.Start(cmd, "")
	if err != nil {
		return nil, "", err
	}
	if err := waitTCP(addr, 15*time.Second, p); err != nil {
		p.Stop(stopGrace)
		return nil, "", fmt.Errorf("e2e: haproxy did not listen: %w", err)
	}
	return p, "http://" + addr + "/v1/chat/completions", nil
}
