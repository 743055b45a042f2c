package caddymodule

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
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
	// URL is the store: redis://[:password@]host:port[/db]. Valkey and
	// Redis 7.0 or later speak the same protocol.
	URL string `json:"url"`
	// KeyPrefix starts every key, so that several deployments can share a
	// store. Default "llmroute:home:".
	KeyPrefix string `json:"key_prefix,omitempty"`
	// TTL is how long a home is kept after its prefix was first placed.
	// Default 1h.
	TTL caddy.Duration `json:"ttl,omitempty"`
	// Timeout bounds each round trip, connection included; past it the
	// router decides without the directory. Default 50ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`
}

// directoryDownFor is how long a store that failed is left alone.
const directoryDownFor = time.Second

// maxIdleConns bounds the connections kept open for the next claims.
const maxIdleConns = 16

// maxLaterClaims bounds the claims made off the request's path that are
// out at once (each a goroutine waiting at most the timeout); past it a
// claim is dropped: the prefix goes unrecorded, as when the store is down.
const maxLaterClaims = 64

// directories holds one client per configuration, shared by the policies
// of successive reloads so that a reload opens no new connections.
var directories sync.Map // config key -> *redisHomes

// homesDirectory returns the client for cfg, creating it on first use.
func homesDirectory(cfg HomesDirectoryConfig, logger *zap.Logger) (*redisHomes, error) {
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "llmroute:home:"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = caddy.Duration(time.Hour)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = caddy.Duration(50 * time.Millisecond)
	}
	key := fmt.Sprintf("%s|%s|%d|%d", cfg.URL, cfg.KeyPrefix, cfg.TTL, cfg.Timeout)
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
	addr     string
	password string
	db       int
	prefix   string
	ttlMS    string
	timeout  time.Duration
	logger   *zap.Logger

	// dir caches the homes the store answered, for Home.
	dir *policies.StoreDirectory
	// downUntil (unix nanoseconds) is when the store may be tried again.
	downUntil atomic.Int64
	warned    atomic.Bool

	// later holds a token per claim out off the request's path.
	later chan struct{}

	mu   sync.Mutex
	idle []*respConn
}

// respConn is one connection with its reader.
type respConn struct {
	net.Conn
	r *bufio.Reader
}

func newRedisHomes(cfg HomesDirectoryConfig, logger *zap.Logger) (*redisHomes, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "valkey") || u.Host == "" {
		return nil, fmt.Errorf("homes_directory: want redis://host:port[/db], got %q", cfg.URL)
	}
	d := &redisHomes{addr: u.Host, prefix: cfg.KeyPrefix, ttlMS: strconv.FormatInt(time.Duration(cfg.TTL).Milliseconds(), 10),
		timeout: time.Duration(cfg.Timeout), logger: logger, later: make(chan struct{}, maxLaterClaims)}
	d.dir = policies.NewStoreDirectory(d)
	if _, _, err := net.SplitHostPort(d.addr); err != nil {
		d.addr = net.JoinHostPort(d.addr, "6379")
	}
	if u.User != nil {
		d.password, _ = u.User.Password()
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if d.db, err = strconv.Atoi(db); err != nil || d.db < 0 {
			return nil, fmt.Errorf("homes_directory: bad database %q", db)
		}
	}
	if d.logger == nil {
		d.logger = zap.NewNop()
	}
	return d, nil
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
// directoryDownFor.
func (d *redisHomes) claim(key uint64, addr string) (string, bool) {
	if time.Now().UnixNano() < d.downUntil.Load() {
		return "", false
	}
	k := d.prefix + strconv.FormatUint(key, 16)
	val, isNil, err := d.do("SET", k, addr, "NX", "GET", "PX", d.ttlMS)
	if err != nil {
		d.downUntil.Store(time.Now().Add(directoryDownFor).UnixNano())
		if !d.warned.Swap(true) {
			d.logger.Warn("homes directory unavailable; placing new prefixes without it", zap.String("addr", d.addr), zap.Error(err))
		}
		return "", false
	}
	if d.warned.Swap(false) {
		d.logger.Info("homes directory available again", zap.String("addr", d.addr))
	}
	if !isNil {
		return val, true
	}
	return addr, true
}

// do sends one command and reads a bulk or simple string reply (isNil
// for a null bulk string).
func (d *redisHomes) do(args ...string) (val string, isNil bool, err error) {
	c, err := d.conn()
	if err != nil {
		return "", false, err
	}
	val, isNil, err = c.roundTrip(d.timeout, args...)
	if err != nil {
		c.Close()
		return "", false, err
	}
	d.mu.Lock()
	if len(d.idle) < maxIdleConns {
		d.idle, c = append(d.idle, c), nil
	}
	d.mu.Unlock()
	if c != nil {
		c.Close() // a burst's extra connection
	}
	return val, isNil, nil
}

// conn returns an idle connection or a new one, authenticated and on its
// database.
func (d *redisHomes) conn() (*respConn, error) {
	d.mu.Lock()
	if n := len(d.idle); n > 0 {
		c := d.idle[n-1]
		d.idle = d.idle[:n-1]
		d.mu.Unlock()
		return c, nil
	}
	d.mu.Unlock()
	nc, err := net.DialTimeout("tcp", d.addr, d.timeout)
	if err != nil {
		return nil, err
	}
	c := &respConn{Conn: nc, r: bufio.NewReader(nc)}
	if d.password != "" {
		if _, _, err := c.roundTrip(d.timeout, "AUTH", d.password); err != nil {
			c.Close()
			return nil, err
		}
	}
	if d.db != 0 {
		if _, _, err := c.roundTrip(d.timeout, "SELECT", strconv.Itoa(d.db)); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// roundTrip writes one RESP command and reads its reply.
func (c *respConn) roundTrip(timeout time.Duration, args ...string) (string, bool, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", false, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", false, err
	}
	return readReply(c.r)
}

// maxReply bounds a bulk reply (a replica address).
const maxReply = 4096

// readReply reads one RESP reply: a bulk string (isNil for $-1 or the
// RESP3 null), a simple string or an integer; an error reply is an error.
func readReply(r *bufio.Reader) (string, bool, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", false, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", false, errors.New("homes directory: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], false, nil
	case '_':
		return "", true, nil
	case '-':
		return "", false, fmt.Errorf("homes directory: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		switch {
		case err != nil:
			return "", false, fmt.Errorf("homes directory: bad reply %q", line)
		case n < 0:
			return "", true, nil
		case n > maxReply:
			return "", false, fmt.Errorf("homes directory: reply of %d bytes", n)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", false, err
		}
		return string(buf[:n]), false, nil
	}
	return "", false, fmt.Errorf("homes directory: unexpected reply %q", line)
}

// Interface guards
var (
	_ policies.Directory      = (*redisHomes)(nil)
	_ policies.LaterClaimer   = (*redisHomes)(nil)
	_ policies.LaterHomeStore = (*redisHomes)(nil)
)
