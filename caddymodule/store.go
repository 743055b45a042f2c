package caddymodule

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// The shared store: Valkey, or Redis 7.0 or later, that several gateway
// instances use to agree (docs/scaling.md). The client is go-redis: pooled
// connections, TLS for rediss://, reconnection on its own. Every call is
// bounded by the store's timeout, and a store that failed is left alone
// for storeDownFor, so that a store that is down costs a request nothing
// but the first timeout: the features fall back to this instance's own
// state. The client's reads pass through guardedConn (storeguard.go),
// which bounds what a faulty store can make it allocate.

// storeDownFor is how long a store that failed is left alone.
const storeDownFor = time.Second

// storeMaxIdle bounds the connections kept open for the next calls.
const storeMaxIdle = 16

// storePoolSize bounds the connections open at once: as many as the
// homes directory's claims off the request's path, so that those never
// wait for a connection.
const storePoolSize = maxLaterClaims

// storeClients holds one client per storeAddr, shared by every
// user in the process (the handlers and policies of successive reloads),
// so that a reload opens no new connections; the last user's release
// closes it.
var storeClients = caddy.NewUsagePool()

// storeClient is one pooled client and what the gateway knows of the
// store's health.
type storeClient struct {
	rdb     *redis.Client
	addr    string // host:port, for logs and /llm_route/state (no password)
	timeout time.Duration
	logger  *zap.Logger

	// downUntil (unix nanoseconds) is when the store may be tried again.
	downUntil atomic.Int64
	warned    atomic.Bool
	errs      atomic.Uint64
	lastErr   atomic.Pointer[string]
	lastOK    atomic.Int64 // unix nanoseconds of the last answer
}

// errTLSCANeedsRediss refuses tls_ca on a store that does not speak TLS.
var errTLSCANeedsRediss = errors.New("tls_ca needs a rediss:// URL")

// errBadAnswer is a store's answer that the gateway's command cannot have
// had (a store that answers garbage).
var errBadAnswer = errors.New("shared store: unexpected answer")

// storeAddr is how to reach a store: its URL, the timeout of each round
// trip and the CA file of its TLS certificate ("" for the system's).
type storeAddr struct {
	url     string
	timeout time.Duration
	tlsCA   string
}

// key names the store's client in storeClients.
func (a storeAddr) key() string {
	return fmt.Sprintf("%s|%d|%s", a.url, a.timeout, a.tlsCA)
}

// acquireStore returns the client for a, opening it on first use; release
// it with releaseStore(a.key()).
func acquireStore(a storeAddr, logger *zap.Logger) (*storeClient, error) {
	v, _, err := storeClients.LoadOrNew(a.key(), func() (caddy.Destructor, error) {
		return newStoreClient(a, logger)
	})
	if err != nil {
		return nil, err
	}
	return v.(*storeClient), nil
}

// releaseStore drops a reference taken by acquireStore.
func releaseStore(key string) { _, _ = storeClients.Delete(key) }

// parseStoreURL reads redis://[user:password@]host:port[/db] (rediss://
// for TLS; valkey:// and valkeys:// as their aliases).
func parseStoreURL(rawURL string) (*redis.Options, error) {
	u := rawURL
	for alias, scheme := range map[string]string{"valkey://": "redis://", "valkeys://": "rediss://"} {
		if strings.HasPrefix(u, alias) {
			u = scheme + strings.TrimPrefix(u, alias)
		}
	}
	if !strings.HasPrefix(u, "redis://") && !strings.HasPrefix(u, "rediss://") {
		return nil, fmt.Errorf("want redis://[user:password@]host:port[/db] or rediss://, got %q", redactURL(rawURL))
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		// go-redis's errors name the part that is wrong, not the password.
		return nil, fmt.Errorf("store URL %q: %v", redactURL(rawURL), err)
	}
	return opt, nil
}

// redactURL hides a URL's password.
func redactURL(rawURL string) string {
	at := strings.LastIndex(rawURL, "@")
	scheme := strings.Index(rawURL, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return rawURL
	}
	return rawURL[:scheme+3] + "***" + rawURL[at:]
}

// storeRoots reads the certificate authorities of a store's TLS
// certificate from the PEM file tlsCA.
func storeRoots(tlsCA string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(tlsCA)
	if err != nil {
		return nil, fmt.Errorf("tls_ca: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls_ca %s: no PEM certificate in the file", tlsCA)
	}
	return roots, nil
}

func newStoreClient(a storeAddr, logger *zap.Logger) (*storeClient, error) {
	opt, err := parseStoreURL(a.url)
	if err != nil {
		return nil, err
	}
	if a.tlsCA != "" {
		if opt.TLSConfig == nil {
			return nil, errTLSCANeedsRediss
		}
		if opt.TLSConfig.RootCAs, err = storeRoots(a.tlsCA); err != nil {
			return nil, err
		}
	}
	timeout := a.timeout
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &storeClient{addr: opt.Addr, timeout: timeout, logger: logger}
	// RESP2 and no CLIENT SETINFO: the commands the gateway sends need
	// nothing else, and an older or proxied store answers them all.
	opt.Protocol, opt.DisableIdentity = 2, true
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = timeout, timeout, timeout, timeout
	// A call is retried once at once (a pooled connection the store
	// closed when it restarted), within the same timeout: past it the
	// caller decides on its own state.
	opt.MaxRetries, opt.MinRetryBackoff, opt.MaxRetryBackoff = 1, -1, -1
	opt.ContextTimeoutEnabled = true
	opt.MaxIdleConns, opt.PoolSize = storeMaxIdle, storePoolSize
	opt.DialerRetries = 1 // one dial per call: the timeout bounds it anyway
	tlsConfig := opt.TLSConfig
	nd := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	opt.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		var err error
		if tlsConfig != nil {
			c, err = (&tls.Dialer{NetDialer: nd, Config: tlsConfig}).DialContext(ctx, network, addr)
		} else {
			c, err = nd.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		return newGuardedConn(c), nil
	}
	s.rdb = redis.NewClient(opt)
	return s, nil
}

// storeLog is go-redis's logger: the gateway reports a store's failures
// itself (storeClient.done), once per outage, so the client's own lines
// are debug.
type storeLog struct{}

func (storeLog) Printf(_ context.Context, format string, v ...any) {
	if c := caddy.Log().Named("llmroute.store").Check(zap.DebugLevel, "go-redis"); c != nil {
		c.Write(zap.String("msg", fmt.Sprintf(format, v...)))
	}
}

func init() { redis.SetLogger(storeLog{}) }

// Destruct implements caddy.Destructor: the last user released the client.
func (s *storeClient) Destruct() error { return s.rdb.Close() }

// ctx bounds one call by the store's timeout.
func (s *storeClient) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// available reports whether the store may be tried now: it did not fail
// within the last storeDownFor.
func (s *storeClient) available() bool { return time.Now().UnixNano() >= s.downUntil.Load() }

// done records a call's outcome: a failure (redis.Nil is an answer) marks
// the store down for storeDownFor and counts in
// llmroute_shared_store_errors_total; it returns whether the store
// answered.
func (s *storeClient) done(op string, err error) bool {
	if err == nil || errors.Is(err, redis.Nil) {
		s.lastOK.Store(time.Now().UnixNano())
		if s.warned.Swap(false) {
			s.logger.Info("shared store available again", zap.String("addr", s.addr))
		}
		return true
	}
	s.downUntil.Store(time.Now().Add(storeDownFor).UnixNano())
	s.errs.Add(1)
	msg := err.Error()
	s.lastErr.Store(&msg)
	metricStoreErrors.WithLabelValues(op).Inc()
	if !s.warned.Swap(true) {
		s.logger.Warn("shared store unavailable; deciding on this instance's state", zap.String("addr", s.addr), zap.Error(err))
	}
	return false
}

// Interface guards
var _ caddy.Destructor = (*storeClient)(nil)
