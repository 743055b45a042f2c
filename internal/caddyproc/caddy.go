package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/proc"
	"github.com/llmroute/caddy-llmroute/internal/procstat"
)

// SiteConfig describes the Caddyfile a test or the soak runs: one site on
// a loopback address with llm_route in front of reverse_proxy and the llm
// policy, retries as in Caddyfile.example.
type SiteConfig struct {
	AdminAddr  string // 127.0.0.1:port of the admin API
	ListenAddr string // 127.0.0.1:port of the site
	Upstreams  []string

	// Dynamic, when set, is a reverse_proxy dynamic upstream block (for
	// example "dynamic a svc.test. 8000 {\n\trefresh 200ms\n}"), rendered
	// in the reverse_proxy block after the static Upstreams (usually none).
	Dynamic string
	// TransportResolvers, when set, are the DNS servers the http transport
	// resolves upstream host names with (dynamic srv targets).
	TransportResolvers []string

	APIKey       string // "" turns authentication off
	MaxBodyBytes string // e.g. "64KiB"; "" keeps the default
	ReplicaHdr   string // "" turns the replica header off
	NoUsage      bool   // leave request_usage off

	Strategy     string
	MaxInFlight  int
	QueueSize    int
	QueueTimeout time.Duration
	CooldownBase time.Duration
	CooldownMax  time.Duration
	FailStatus   []int
	ColdChoices  int // 0 keeps the default
	// ColdBalanceFactor is cold_balance_factor; 0 keeps the default.
	ColdBalanceFactor float64
	// SlowStart, when set, is the policy's slow_start ramp.
	SlowStart time.Duration

	// Retries is lb_retries; NoRetryMatch leaves out the lb_retry_match
	// rules (429/503 and transport errors).
	Retries      int
	NoRetryMatch bool

	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	// RequestBuffers, when set, is reverse_proxy's request_buffers size.
	RequestBuffers string

	// LogLevel is Caddy's default log level (default WARN).
	LogLevel string
}

var siteTmpl = template.Must(template.New("caddyfile").Funcs(template.FuncMap{
	"join": strings.Join,
	"ints": func(xs []int) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = strconv.Itoa(x)
		}
		return strings.Join(s, " ")
	},
	// indent puts tabs before every line of s after the first.
	"indent": func(tabs int, s string) string {
		return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat("\t", tabs))
	},
}).Parse(`{
	admin {{.AdminAddr}}
	auto_https off
	persist_config off
	grace_period 2s
	metrics
	log {
		output stderr
		level {{.LogLevel}}
	}
}

http://{{.ListenAddr}} {
	bind 127.0.0.1
	llm_route {
{{- if .APIKey}}
		api_keys {{.APIKey}}
{{- end}}
		deployment test-model-v1
{{- if .MaxBodyBytes}}
		max_body_bytes {{.MaxBodyBytes}}
{{- end}}
{{- if .ReplicaHdr}}
		replica_header {{.ReplicaHdr}}
{{- end}}
{{- if not .NoUsage}}
		request_usage
{{- end}}
	}
	reverse_proxy {{join .Upstreams " "}} {
{{- if .Dynamic}}
		{{indent 2 .Dynamic}}
{{- end}}
		lb_policy llm {
			strategy {{.Strategy}}
			max_in_flight {{.MaxInFlight}}
			queue_size {{.QueueSize}}
			queue_timeout {{.QueueTimeout}}
			cooldown {{.CooldownBase}} {{.CooldownMax}}
{{- if .FailStatus}}
			fail_status {{ints .FailStatus}}
{{- end}}
{{- if .ColdChoices}}
			cold_choices {{.ColdChoices}}
{{- end}}
{{- if .ColdBalanceFactor}}
			cold_balance_factor {{.ColdBalanceFactor}}
{{- end}}
{{- if .SlowStart}}
			slow_start {{.SlowStart}}
{{- end}}
		}
{{- if .Retries}}
		lb_retries {{.Retries}}
{{- end}}
{{- if not .NoRetryMatch}}
		lb_retry_match {
			expression ` + "`{rp.status_code} in [429, 503]`" + `
		}
		lb_retry_match {
			expression ` + "`{rp.is_transport_error} == true`" + `
		}
{{- end}}
{{- if .RequestBuffers}}
		request_buffers {{.RequestBuffers}}
{{- end}}
		transport http {
			dial_timeout {{.DialTimeout}}
			response_header_timeout {{.ResponseHeaderTimeout}}
{{- if .TransportResolvers}}
			resolvers {{join .TransportResolvers " "}}
{{- end}}
		}
	}
}
`))

// Caddyfile renders the config, filling defaults for zero fields.
func (c SiteConfig) Caddyfile() string {
	if c.Strategy == "" {
		c.Strategy = "prefix_load"
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 16
	}
	if c.QueueSize == 0 {
		c.QueueSize = 64
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = 10 * time.Second
	}
	if c.CooldownBase == 0 {
		c.CooldownBase = time.Second
	}
	if c.CooldownMax == 0 {
		c.CooldownMax = 30 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.ResponseHeaderTimeout == 0 {
		c.ResponseHeaderTimeout = 120 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "WARN"
	}
	var b bytes.Buffer
	if err := siteTmpl.Execute(&b, c); err != nil {
		panic(err)
	}
	return b.String()
}

// FreeAddr returns 127.0.0.1:<port> of a port that was free a moment ago.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// RepoRoot returns the repository root: the directory of the plugin's
// go.mod (module github.com/llmroute/caddy-llmroute), from the working
// directory up, so that the tools that build or find ./caddy work from the
// repository and from its nested lab module alike.
func RepoRoot() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/llmroute/caddy-llmroute\n")) {
			return d, nil
		}
		p := filepath.Dir(d)
		if p == d {
			return "", errors.New("the llmroute repository's go.mod is not above the working directory: run from the repository")
		}
		d = p
	}
}

// Caddy is one running caddy process.
type Caddy struct {
	AdminAddr string
	p         *proc.Proc
	client    *http.Client
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
	c := &Caddy{AdminAddr: adminAddr, p: p,
		// No keep-alive: a reload replaces Caddy's admin server, and a
		// request on a connection kept to the old one fails with EOF.
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := c.ready(ctx, listenAddr); err == nil {
			return c, nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			c.Stop()
			return nil, fmt.Errorf("caddy did not come up: %v; log:\n%s", err, c.LogTail(4000))
		}
		select {
		case <-p.Done():
			return nil, fmt.Errorf("caddy exited: %v; log:\n%s", p.Err(), c.LogTail(4000))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Caddy) ready(ctx context.Context, listenAddr string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.AdminAddr+"/config/", nil)
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("admin /config/: %s", resp.Status)
	}
	conn, err := net.DialTimeout("tcp", listenAddr, time.Second)
	if err != nil {
		return err
	}
	return conn.Close()
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

// Load replaces the config with caddyfile through POST /load.
func (c *Caddy) Load(ctx context.Context, caddyfile string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+c.AdminAddr+"/load", strings.NewReader(caddyfile))
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := c.client.Do(req)
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

// ReplicaState is one replica in GET /llm_route/state.
type ReplicaState struct {
	Addr          string     `json:"addr"`
	InFlight      int        `json:"in_flight"`
	Failures      int        `json:"consecutive_failures"`
	Cooling       bool       `json:"cooling"`
	CoolUntil     *time.Time `json:"cooldown_until"`
	CoolReason    string     `json:"cooldown_reason"`
	NeedProbe     bool       `json:"needs_probe"`
	Probing       bool       `json:"probe_in_flight"`
	Draining      bool       `json:"draining"`
	IndexEntries  int        `json:"index_entries"`
	IndexCapacity int        `json:"index_capacity"`
	Feedback      struct {
		Checks     int `json:"checks"`
		Hits       int `json:"hits"`
		Misses     int `json:"misses"`
		Cold       int `json:"cold"`
		Concurrent int `json:"concurrent"`
	} `json:"feedback"`
}

// State is the body of GET /llm_route/state.
type State struct {
	Replicas      []ReplicaState `json:"replicas"`
	TotalInFlight int            `json:"total_in_flight"`
	Queued        int            `json:"queued"`
}

// Replica returns addr's entry, if any.
func (s State) Replica(addr string) (ReplicaState, bool) {
	for _, r := range s.Replicas {
		if r.Addr == addr {
			return r, true
		}
	}
	return ReplicaState{}, false
}

// Idle reports whether no reservation is held and nothing is queued.
func (s State) Idle() bool {
	if s.TotalInFlight != 0 || s.Queued != 0 {
		return false
	}
	for _, r := range s.Replicas {
		if r.InFlight != 0 || r.Probing {
			return false
		}
	}
	return true
}

// State reads GET /llm_route/state.
func (c *Caddy) State(ctx context.Context) (State, error) {
	var st State
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.AdminAddr+"/llm_route/state", nil)
	resp, err := c.client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return st, fmt.Errorf("GET /llm_route/state: %s: %s", resp.Status, b)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// WaitState polls the state every 20 ms until cond holds or timeout
// passes; it returns the last state read.
func (c *Caddy) WaitState(ctx context.Context, timeout time.Duration, cond func(State) bool) (State, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.State(ctx)
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
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitIdle waits until State.Idle holds.
func (c *Caddy) WaitIdle(ctx context.Context, timeout time.Duration) (State, error) {
	return c.WaitState(ctx, timeout, State.Idle)
}

// Goroutines reads go_goroutines from the admin /metrics.
func (c *Caddy) Goroutines(ctx context.Context) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.AdminAddr+"/metrics", nil)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int(f), err
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("go_goroutines not found in /metrics")
}

// RSS returns the process's resident set size in bytes (VmRSS).
func (c *Caddy) RSS() (int64, error) {
	kb, err := procstat.StatusKB(c.Pid(), "VmRSS")
	return kb * 1024, err
}
