package caddymodule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
)

// llm_route's shared_store: the state several gateway instances must agree
// on lives in one Valkey or Redis store (docs/scaling.md): response and
// conversation pins (sharedpins.go), session homes (sharedsessions.go),
// the tenants' per-minute budgets (sharedbudgets.go) and their
// max_in_flight (sharedleases.go). Each instance registers itself under the key prefix
// with a heartbeat, so that every instance knows how many share the
// store: while the store does not answer, each enforces its share of a
// budget (limit / instances) on its own.

// SharedStoreConfig configures the store several instances share.
type SharedStoreConfig struct {
	// URL is the store: redis://[user:password@]host:port[/db], or
	// rediss:// for TLS (Valkey, or Redis 7.0 or later). {env.*}
	// placeholders are resolved when the config loads, so that a password
	// need not be written in the config. lb_policy llm's
	// homes_directory shared_store uses this store.
	URL string `json:"url"`
	// TLSCA is a PEM file of the certificate authorities that sign the
	// store's certificate, for a rediss:// store whose certificate the
	// system's roots do not vouch for (a private CA). Default: the
	// system's roots.
	TLSCA string `json:"tls_ca,omitempty"`
	// KeyPrefix starts every key, so that several deployments can share a
	// store; the instances that share state must use the same. Default
	// "llmroute:".
	KeyPrefix string `json:"key_prefix,omitempty"`
	// Timeout bounds each round trip, connection included; past it the
	// instance decides on its own state, and leaves the store alone for a
	// second. Default 50ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`
}

const (
	defaultStorePrefix  = "llmroute:"
	defaultStoreTimeout = 50 * time.Millisecond
	// heartbeatEvery is how often an instance renews its registration;
	// one not renewed for instanceTTL no longer counts.
	heartbeatEvery = time.Second
	instanceTTL    = 5 * time.Second
)

// instanceID names this process among the instances sharing a store.
var instanceID = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// sharedStores holds one sharedStore per URL, timeout and key prefix,
// shared by the handlers of successive reloads; the last one's Cleanup
// stops its heartbeat and releases its client.
var sharedStores = caddy.NewUsagePool()

// sharedStore is a store client under one key prefix, with this
// instance's registration.
type sharedStore struct {
	c         *storeClient
	clientKey string
	prefix    string
	// id names this instance in the instances' set (instanceID).
	id string
	// instances is how many instances the last heartbeat saw (at least 1).
	instances atomic.Int64
	// leases are the tenants' max_in_flight leases held (sharedleases.go).
	leases leases
	// sessionWrites holds a token per session write out (sharedsessions.go).
	sessionWrites chan struct{}
	stop          chan struct{}
	done          chan struct{}
}

// provisionShared resolves the shared_store's placeholders and takes a
// reference on its sharedStore.
func (h *LLMRoute) provisionShared(repl *caddy.Replacer) error {
	if h.SharedStore == nil {
		return nil
	}
	cfg := *h.SharedStore
	rawURL, err := repl.ReplaceOrErr(cfg.URL, true, true)
	if err != nil {
		return fmt.Errorf("shared_store: %v", err)
	}
	rawURL = strings.TrimSpace(rawURL)
	if _, err := parseStoreURL(rawURL); err != nil {
		return fmt.Errorf("shared_store: %v", err)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = defaultStorePrefix
	}
	timeout := time.Duration(cfg.Timeout)
	if timeout <= 0 {
		timeout = defaultStoreTimeout
	}
	tlsCA, err := repl.ReplaceOrErr(cfg.TLSCA, true, true)
	if err != nil {
		return fmt.Errorf("shared_store: %v", err)
	}
	at := storeAddr{url: rawURL, timeout: timeout, tlsCA: tlsCA}
	key := at.key() + "|" + cfg.KeyPrefix
	v, _, err := sharedStores.LoadOrNew(key, func() (caddy.Destructor, error) {
		return openSharedStore(at, cfg.KeyPrefix, instanceID, h.logger)
	})
	if err != nil {
		return fmt.Errorf("shared_store: %v", err)
	}
	h.shared, h.sharedKey = v.(*sharedStore), key
	return nil
}

// releaseShared drops the handler's reference (Cleanup). h.shared stays
// set: requests of this config may still be running, and a store whose
// last user left answers them with errors, which they survive.
func (h *LLMRoute) releaseShared() {
	if h.sharedKey != "" {
		_, _ = sharedStores.Delete(h.sharedKey)
		h.sharedKey = ""
	}
}

// openSharedStore opens the store under prefix and registers the
// instance id there.
func openSharedStore(at storeAddr, prefix, id string, logger *zap.Logger) (*sharedStore, error) {
	c, err := acquireStore(at, logger)
	if err != nil {
		return nil, err
	}
	s := &sharedStore{c: c, clientKey: at.key(), prefix: prefix, id: id,
		sessionWrites: make(chan struct{}, maxSessionWrites), stop: make(chan struct{}), done: make(chan struct{})}
	s.instances.Store(1)
	trackStore(s, 1)
	go s.heartbeat()
	return s, nil
}

// Destruct implements caddy.Destructor: the last handler using the store
// was cleaned up.
func (s *sharedStore) Destruct() error {
	close(s.stop)
	<-s.done
	trackStore(s, -1)
	releaseStore(s.clientKey)
	return nil
}

// heartbeat registers this instance every heartbeatEvery, learns how
// many are registered and renews the leases it holds.
func (s *sharedStore) heartbeat() {
	defer close(s.done)
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		s.beat()
		s.refreshLeases()
		select {
		case <-s.stop:
			s.leave()
			return
		case <-t.C:
		}
	}
}

// heartbeatScript registers ARGV[1] until now + ARGV[2] ms in the
// instances' sorted set, drops those past their time, and counts the
// rest; the store's clock decides, so that the instances' clocks need not
// agree.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[2]) * 2)
return redis.call('ZCARD', KEYS[1])
`)

func (s *sharedStore) beat() {
	if !s.c.available() {
		return
	}
	ctx, cancel := s.c.ctx()
	defer cancel()
	n, err := heartbeatScript.Run(ctx, s.c.rdb, []string{s.prefix + "instances"}, s.id, instanceTTL.Milliseconds()).Int64()
	if s.c.done("heartbeat", err) && n > 0 {
		s.instances.Store(n)
	}
}

// leave deregisters this instance, so that the others' share grows at
// once rather than after instanceTTL.
func (s *sharedStore) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), s.c.timeout)
	defer cancel()
	s.c.done("heartbeat", s.c.rdb.ZRem(ctx, s.prefix+"instances", s.id).Err())
}

// share returns the number of instances to divide a budget by while the
// store does not answer.
func (s *sharedStore) share() float64 { return float64(max(1, s.instances.Load())) }

// liveStores lists the shared stores of the running configs, for
// /llm_route/state.
var liveStores struct {
	sync.Mutex
	m map[*sharedStore]int
}

// trackStore adds (n 1) or drops (n -1) s in liveStores.
func trackStore(s *sharedStore, n int) {
	liveStores.Lock()
	defer liveStores.Unlock()
	if liveStores.m == nil {
		liveStores.m = map[*sharedStore]int{}
	}
	liveStores.m[s] += n
	if liveStores.m[s] <= 0 {
		delete(liveStores.m, s)
	}
}

// snapshotStores is the shared stores' health for /llm_route/state.
func snapshotStores() []stateapi.Store {
	liveStores.Lock()
	defer liveStores.Unlock()
	out := make([]stateapi.Store, 0, len(liveStores.m))
	for s := range liveStores.m {
		st := stateapi.Store{Addr: s.c.addr, KeyPrefix: s.prefix, Up: s.c.available(), Errors: s.c.errs.Load(),
			Instances: int(s.instances.Load())}
		if e := s.c.lastErr.Load(); e != nil {
			st.LastError = *e
		}
		if ok := s.c.lastOK.Load(); ok > 0 {
			t := time.Unix(0, ok).UTC()
			st.LastAnswer = &t
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr+out[i].KeyPrefix < out[j].Addr+out[j].KeyPrefix })
	return out
}

// Interface guards
var _ caddy.Destructor = (*sharedStore)(nil)
