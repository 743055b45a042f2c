package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
)

// target is one thing the load generator talks to.
type target struct {
	name  string // direct, caddy, llm_<strategy>, haproxy
	url   string // POST URL
	admin string // Caddy admin address, "" if none
	proc  *child // the proxy process; nil for direct
}

func (t *target) pid() int {
	if t.proc == nil {
		return 0
	}
	return t.proc.pid
}

func isLLM(name string) bool { return strings.HasPrefix(name, "llm_") }

// startCaddyTarget writes a Caddyfile and runs `caddy run` pinned to cpus.
func startCaddyTarget(env *benchEnv, name, caddyfile string) (*target, error) {
	dir := filepath.Join(env.workdir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	admin, listen := env.adminAddrs[name], env.listenAddrs[name]
	cfg := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfg, []byte(caddyfile), 0o644); err != nil {
		return nil, err
	}
	xdg := []string{"HOME=" + dir, "XDG_DATA_HOME=" + filepath.Join(dir, "data"), "XDG_CONFIG_HOME=" + filepath.Join(dir, "config")}
	src := env.caddyBin
	if alt := env.altBins[name]; alt != "" {
		src = alt
	}
	// Each target runs its own copy of its binary. Processes of one file
	// share its code's physical pages, and so the CPU caches that hold it:
	// with several targets of one file and one of another
	// (<target>@<binary>), the odd one out ran colder code and read up to
	// 0.1x more CPU per request at the fixed rate, against an identical
	// copy of the same build.
	bin := filepath.Join(dir, "caddy")
	if err := copyFile(src, bin); err != nil {
		return nil, err
	}
	c, err := startChild(name, []string{bin, "run", "--config", cfg, "--adapter", "caddyfile"},
		env.proxyCPUs, len(env.proxyCPUs), xdg, filepath.Join(dir, "caddy.log"), nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitListen(ctx, c, admin); err != nil {
		c.stop()
		return nil, err
	}
	if err := waitListen(ctx, c, listen); err != nil {
		c.stop()
		return nil, err
	}
	return &target{name: name, url: "http://" + listen + "/v1/chat/completions", admin: admin, proc: c}, nil
}

// startHAProxyTarget runs haproxy in the foreground (-db) pinned to cpus.
func startHAProxyTarget(env *benchEnv, name string) (*target, error) {
	dir := filepath.Join(env.workdir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	listen := env.listenAddrs[name]
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(listen, env.upstreams, len(env.proxyCPUs), env.haproxyBalance)), 0o644); err != nil {
		return nil, err
	}
	c, err := startChild(name, []string{env.haproxyBin, "-db", "-f", cfg}, env.proxyCPUs, 0, nil, filepath.Join(dir, "haproxy.log"), nil)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := waitListen(ctx, c, listen); err != nil {
		c.stop()
		return nil, err
	}
	return &target{name: name, url: "http://" + listen + "/v1/chat/completions", proc: c}, nil
}

// startTarget starts the named target.
func startTarget(env *benchEnv, name string, maxInFlight int) (*target, error) {
	return startTargetAs(env, name, name, maxInFlight)
}

// startTargetAs starts target name as the process full: its addresses,
// work folder and binary are full's (the profiles run a second process
// of a matrix target).
func startTargetAs(env *benchEnv, full, name string, maxInFlight int) (*target, error) {
	if env.adminAddrs[full] == "" {
		env.adminAddrs[full], env.listenAddrs[full] = freeAddr(), freeAddr()
	}
	base, _, _ := strings.Cut(name, "@") // llm_prefix_load@<binary>: another caddy build
	switch name := base; {
	case name == "direct":
		return &target{name: name, url: "http://" + env.upstreams[0] + "/v1/chat/completions"}, nil
	case name == "caddy":
		return startCaddyTarget(env, full, stockCaddyfile(env.adminAddrs[full], env.listenAddrs[full], env.upstreams))
	case name == "haproxy":
		return startHAProxyTarget(env, name)
	case isLLM(name):
		strategy, usage, answers := llmTarget(name)
		return startCaddyTarget(env, full, llmCaddyfile(env.adminAddrs[full], env.listenAddrs[full], env.upstreams, strategy, maxInFlight, usage, answers))
	}
	return nil, fmt.Errorf("unknown target %q", name)
}

// llmTarget reads an llm target's name: llm_<strategy>, with request_usage
// and index_answers on as in Caddyfile.example; llm_<strategy>_nousage,
// request_usage off; llm_<strategy>_lean, both off (what the gateway costs
// with neither optional reader of the answer).
func llmTarget(name string) (strategy string, usage, answers bool) {
	strategy = strings.TrimPrefix(name, "llm_")
	if s, ok := strings.CutSuffix(strategy, "_nousage"); ok {
		return s, false, true
	}
	if s, ok := strings.CutSuffix(strategy, "_lean"); ok {
		return s, false, false
	}
	return strategy, true, true
}

// waitReleased polls /llm_route/state until nothing is in flight or
// queued, and returns what was last read.
func waitReleased(admin string, timeout time.Duration) (inFlight, queued int, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout+5*time.Second)
	defer cancel()
	st, err := caddyproc.NewAdmin(admin).WaitState(ctx, timeout, func(st stateapi.State) bool {
		return st.TotalInFlight == 0 && st.Queued == 0
	})
	return st.TotalInFlight, st.Queued, err
}

// copyFile copies src to dst (a new file, executable), byte for byte: not
// a link, which would share src's pages.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
