package caddymodule

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/llmroute/caddy-llmroute/policies"
)

// The homes directory (homes_directory): several llmroute instances share
// where each new prefix was first placed, in Valkey or Redis, so that
// prefix_load can place new prefixes by load and every instance still
// sends a prefix's later requests where its first one went. Without it
// instances agree only through the rendezvous home, which places traffic
// that shares nothing by hash (docs/scaling.md).
//
// One command per new prefix: SET <prefix><key> <replica> NX GET PX <ttl>
// (Valkey, or Redis 7.0 or later) records this router's choice unless
// another recorded one first, and returns that one. Answers are cached, so
// the prefix's later requests cost no round trip. A store that does not
// answer within the timeout is left alone for a second and prefix_load
// places as it does without a directory: the router keeps working on its
// own state.

// HomesDirectoryConfig configures the shared table of homes.
type HomesDirectoryConfig struct {
	// URL is the store: redis://[user:password@]host:port[/db], or
	// rediss:// for TLS. Valkey and Redis 7.0 or later speak the same
	// protocol. Leave it out with shared_store.
	URL string `json:"url,omitempty"`
	// SharedStore keeps the homes in llm_route's shared_store (the store
	// of the llm_route handler that read the request), with its
	// connections, timeout and TLS settings, instead of a store of the
	// directory's own. Until a request has come through a handler with a
	// shared_store, new prefixes are placed as without a directory.
	SharedStore bool `json:"shared_store,omitempty"`
	// KeyPrefix starts every key, so that several deployments can share a
	// store. Default "llmroute:home:", or the shared_store's key_prefix
	// followed by "home:".
	KeyPrefix string `json:"key_prefix,omitempty"`
	// TTL is how long a home is kept after its prefix was first placed.
	// Default 1h.
	TTL caddy.Duration `json:"ttl,omitempty"`
	// Timeout bounds each round trip, connection included; past it the
	// router decides without the directory. Default 50ms; with
	// shared_store, the store's timeout applies.
	Timeout caddy.Duration `json:"timeout,omitempty"`
}

// validate checks that the directory names one store.
func (cfg HomesDirectoryConfig) validate() error {
	if !cfg.SharedStore {
		_, err := parseStoreURL(cfg.URL)
		return err
	}
	if cfg.URL != "" {
		return errors.New("give a store URL or shared_store, not both")
	}
	if cfg.Timeout != 0 {
		return errors.New("with shared_store the store's own timeout applies")
	}
	return nil
}

// maxLaterClaims bounds the claims made off the request's path that are
// out at once (each a goroutine waiting at most the timeout); past it a
// claim is dropped: the prefix goes unrecorded, as when the store is down.
const maxLaterClaims = 64

// directories holds one directory per configuration, shared by the
// policies of successive reloads so that a reload opens no new
// connections (the store client under it is shared by URL: store.go).
var directories sync.Map // config key -> *redisHomes

// homesDirectory returns the directory for cfg, creating it on first use.
func homesDirectory(cfg HomesDirectoryConfig, logger *zap.Logger) (*redisHomes, error) {
	if cfg.KeyPrefix == "" && !cfg.SharedStore {
		cfg.KeyPrefix = "llmroute:home:"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = caddy.Duration(time.Hour)
	}
	if cfg.Timeout <= 0 && !cfg.SharedStore {
		cfg.Timeout = caddy.Duration(50 * time.Millisecond)
	}
	key := fmt.Sprintf("%s|%t|%s|%d|%d", cfg.URL, cfg.SharedStore, cfg.KeyPrefix, cfg.TTL, cfg.Timeout)
	if d, ok := directories.Load(key); ok {
		return d.(*redisHomes), nil
	}
	d, err := newRedisHomes(cfg, logger)
	if err != nil {
		return nil, err
	}
	got, _ := directories.LoadOrStore(key, d)
	return got.(*redisHomes), nil
}

// redisHomes is a policies.HomeStore in Valkey or Redis, and the
// policies.Directory over it (dir: the answers it gave, cached).
type redisHomes struct {
	url     string
	timeout time.Duration
	prefix  string // "" with shared_store: the store's prefix + "home:"
	ttlMS   string
	logger  *zap.Logger

	// store is opened on the first claim, so that parsing a config opens
	// nothing.
	openOnce sync.Once
	store    *storeClient

	// shared is set with shared_store: the homes live in bound, the store
	// of the handler that read the latest request (bindShared).
	shared bool
	bound  atomic.Pointer[sharedStore]

	// dir caches the homes the store answered, for Home.
	dir *policies.StoreDirectory

	// later holds a token per claim out off the request's path.
	later chan struct{}
}

func newRedisHomes(cfg HomesDirectoryConfig, logger *zap.Logger) (*redisHomes, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("homes_directory: %v", err)
	}
	timeout := time.Duration(cfg.Timeout)
	if timeout <= 0 {
		timeout = 50 * time.Millisecond
	}
	d := &redisHomes{url: cfg.URL, timeout: timeout, prefix: cfg.KeyPrefix, logger: logger, shared: cfg.SharedStore,
		ttlMS: strconv.FormatInt(time.Duration(cfg.TTL).Milliseconds(), 10), later: make(chan struct{}, maxLaterClaims)}
	d.dir = policies.NewStoreDirectory(d)
	return d, nil
}

// open returns the store client and the key prefix, taking a reference
// on first use; with shared_store, the bound store's (nil before any).
func (d *redisHomes) open() (*storeClient, string) {
	if d.shared {
		s := d.bound.Load()
		if s == nil {
			return nil, ""
		}
		if d.prefix != "" {
			return s.c, d.prefix
		}
		return s.c, s.prefix + "home:"
	}
	d.openOnce.Do(func() {
		s, err := acquireStore(storeAddr{url: d.url, timeout: d.timeout}, d.logger)
		if err == nil {
			d.store = s
		}
	})
	return d.store, d.prefix
}

// bindShared makes s the store of a shared_store directory: the store of
// the llm_route handler that read the request being placed. The handlers
// of one config share one store per URL and prefix, so this changes only
// when a reload brings another.
func (d *redisHomes) bindShared(s *sharedStore) {
	if s != nil && d.bound.Load() != s {
		d.bound.Store(s)
	}
}

// bindHomes points a shared_store homes directory at the store of the
// handler that read the request.
func (p *LLMSelection) bindHomes(rc *routeCtx) {
	if rc.shared == nil {
		p.noStoreWarn.Do(func() {
			p.logger.Warn("homes_directory shared_store: the llm_route handler before this proxy has no shared_store; new prefixes are placed without a directory")
		})
		return
	}
	p.sharedHomes.bindShared(rc.shared)
}

// Home returns the home the store gave for key, from the cache.
func (d *redisHomes) Home(key uint64) (string, bool) { return d.dir.Home(key) }

// Claim records addr as key's home unless the store has one, caches the
// store's answer and returns it; ok is false when the store did not
// answer.
func (d *redisHomes) Claim(key uint64, addr string) (string, bool) { return d.dir.Claim(key, addr) }

// ClaimLater implements policies.LaterClaimer: the claim runs off the
// request's path (ClaimHomeLater) and its answer is cached.
func (d *redisHomes) ClaimLater(key uint64, addr string, done func(home string, ok bool)) {
	d.dir.ClaimLater(key, addr, done)
}

// ClaimHome implements policies.HomeStore: SET NX GET on the request's
// path.
func (d *redisHomes) ClaimHome(key uint64, addr string) (string, bool) {
	home, ok := d.claim(key, addr)
	metricHomesClaims.WithLabelValues(claimHow(ok, "path")).Inc()
	return home, ok
}

// ClaimHomeLater implements policies.LaterHomeStore: the claim in a
// goroutine of its own, at most maxLaterClaims at once (past that it is
// dropped and done never runs), each bounded by the store's timeout.
func (d *redisHomes) ClaimHomeLater(key uint64, addr string, done func(home string, ok bool)) {
	select {
	case d.later <- struct{}{}:
	default:
		metricHomesClaims.WithLabelValues("dropped").Inc()
		return
	}
	go func() {
		defer func() { <-d.later }()
		home, ok := d.claim(key, addr)
		metricHomesClaims.WithLabelValues(claimHow(ok, "later")).Inc()
		done(home, ok)
	}()
}

// claimHow is a claim's label in llmroute_homes_directory_claims_total.
func claimHow(ok bool, how string) string {
	if !ok {
		return "failed"
	}
	return how
}

// claim is SET NX GET, unless the store failed within the last
// storeDownFor.
func (d *redisHomes) claim(key uint64, addr string) (string, bool) {
	s, prefix := d.open()
	if s == nil || !s.available() {
		return "", false
	}
	ctx, cancel := s.ctx()
	defer cancel()
	k := prefix + strconv.FormatUint(key, 16)
	val, err := s.rdb.Do(ctx, "SET", k, addr, "NX", "GET", "PX", d.ttlMS).Text()
	if !s.done("homes_claim", err) {
		return "", false
	}
	if err == nil {
		return val, true
	}
	return addr, true // nil: nobody had claimed it
}

// Interface guards
var (
	_ policies.Directory      = (*redisHomes)(nil)
	_ policies.LaterClaimer   = (*redisHomes)(nil)
	_ policies.LaterHomeStore = (*redisHomes)(nil)
)
