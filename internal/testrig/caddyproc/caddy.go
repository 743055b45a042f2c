// Package caddyproc runs the caddy binary (Caddy with llmroute) for the
// integration tests, the soak and the lab's tools: a Caddyfile from a
// SiteConfig, the process started in its own folder and waited for, and
// its admin API (config loads, /llm_route/state, goroutines) and memory
// read back.
package caddyproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/internal/testrig/proc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/procstat"
)

// startTimeout bounds how long StartCaddy waits for caddy to answer.
const startTimeout = 20 * time.Second

// ErrListenTaken says that another process holds an address caddy was to
// listen on (it answered at the site's address, or caddy exited with
// "address already in use"): a free address handed out by netx.FreeAddr
// was taken between its release and caddy's bind (tests run packages in
// parallel). The caller may start again on fresh addresses.
var ErrListenTaken = errors.New("caddyproc: another process holds an address caddy was to listen on")

// Caddy is one running caddy process and its admin API (Addr is the
// admin address).
type Caddy struct {
	*Admin
	p *proc.Proc
}

// StartCaddy runs `bin run` with caddyfile in dir (which also holds its
// data, config and log) and waits until the admin API answers and the site
// listens at listenAddr.
func StartCaddy(ctx context.Context, bin, dir, caddyfile, adminAddr, listenAddr string) (*Caddy, error) {
	// A relative binary would be looked up from dir, caddy's working folder.
	bin, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(cfgPath, []byte(caddyfile), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+filepath.Join(dir, "data"), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"))
	setDeathSignal(cmd)
	p, err := proc.Start(cmd, filepath.Join(dir, "caddy.log"))
	if err != nil {
		return nil, err
	}
	c := &Caddy{Admin: NewAdmin(adminAddr), p: p}
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	err = netx.WaitHTTP(wctx, c.Client, "http://"+adminAddr+"/config/", p.Done())
	if err == nil {
		err = netx.WaitTCP(wctx, listenAddr, p.Done())
	}
	if err == nil && !answersAsCaddy(wctx, listenAddr) {
		c.Stop()
		return nil, fmt.Errorf("%w (%s); caddy's log:\n%s", ErrListenTaken, listenAddr, c.LogTail(2000))
	}
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, netx.ErrExited) && strings.Contains(c.LogTail(8000), "address already in use"):
		return nil, fmt.Errorf("%w: caddy exited: %v; log:\n%s", ErrListenTaken, p.Err(), c.LogTail(4000))
	case errors.Is(err, netx.ErrExited):
		return nil, fmt.Errorf("caddy exited: %v; log:\n%s", p.Err(), c.LogTail(4000))
	default:
		c.Stop()
		return nil, fmt.Errorf("caddy did not come up: %v; log:\n%s", err, c.LogTail(4000))
	}
}

// answersAsCaddy reports whether what answers a plain HTTP GET at addr is
// caddy (its Server header); a request that gets no HTTP answer (a TLS
// site) says nothing against it.
func answersAsCaddy(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return true
	}
	req.Close = true // leave no keep-alive connection to the site behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return true
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.Header.Get("Server") == "Caddy"
}

// Pid returns the process id.
func (c *Caddy) Pid() int { return c.p.Pid() }

// Exited reports whether the process has ended.
func (c *Caddy) Exited() bool { return c.p.Exited() }

// Stop ends the process: SIGTERM, then SIGKILL after 3 s. It is safe to
// call more than once.
func (c *Caddy) Stop() { c.p.Stop(3 * time.Second) }

// LogTail returns the last n bytes of caddy's log.
func (c *Caddy) LogTail(n int) string { return c.p.LogTail(n) }

// RSS returns the process's resident set size in bytes (VmRSS).
func (c *Caddy) RSS() (int64, error) {
	kb, err := procstat.StatusKB(c.Pid(), "VmRSS")
	return kb * 1024, err
}
