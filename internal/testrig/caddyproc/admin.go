package caddyproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
)

// StatePollInterval is how often WaitState reads the state.
const StatePollInterval = 20 * time.Millisecond

// Admin is a client of a running caddy's admin API, whoever started it.
type Admin struct {
	// Addr is the admin API's host:port.
	Addr string
	// Client sends the requests.
	Client *http.Client
}

// NewAdmin returns a client of the admin API at addr (host:port). Its
// requests time out after 10 s and use no keep-alive: a config load
// replaces Caddy's admin server, and a request on a connection kept to the
// old one fails with EOF.
func NewAdmin(addr string) *Admin {
	return &Admin{Addr: addr, Client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}}
}

// Load replaces the config with caddyfile through POST /load.
func (a *Admin) Load(ctx context.Context, caddyfile string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+a.Addr+"/load", strings.NewReader(caddyfile))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := a.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /load: %s: %s", resp.Status, b)
	}
	return nil
}

// State reads GET /llm_route/state.
func (a *Admin) State(ctx context.Context) (stateapi.State, error) {
	var st stateapi.State
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.Addr+stateapi.Path, nil)
	if err != nil {
		return st, err
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return st, fmt.Errorf("GET %s: %s: %s", stateapi.Path, resp.Status, b)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// WaitState reads the state every StatePollInterval until cond holds or
// timeout passes; it returns the last state read.
func (a *Admin) WaitState(ctx context.Context, timeout time.Duration, cond func(stateapi.State) bool) (stateapi.State, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := a.State(ctx)
		if err == nil && cond(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = errors.New("condition not met before the deadline")
			}
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(StatePollInterval):
		}
	}
}

// WaitIdle waits until stateapi.State.Idle holds.
func (a *Admin) WaitIdle(ctx context.Context, timeout time.Duration) (stateapi.State, error) {
	return a.WaitState(ctx, timeout, stateapi.State.Idle)
}

// Goroutines reads go_goroutines from the admin /metrics.
func (a *Admin) Goroutines(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.Addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("go_goroutines not found in /metrics")
}
