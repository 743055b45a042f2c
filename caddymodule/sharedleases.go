package caddymodule

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// A tenant's max_in_flight across the instances sharing a store: each
// request of a capped tenant holds a lease in the store, a member of a
// sorted set per tenant scored by its expiry, taken by a script that
// counts the live ones first and released at the request's end. The
// instance refreshes its leases with its heartbeat, so that a lease
// outlives its request only when the instance died, and then by at most
// leaseTTL: a crashed instance's slots come back on their own.
//
// A request that finds the tenant's leases all taken waits, polling the
// store, until one is free, its client leaves or leaseWait passes (429
// queue_timeout). While the store does not answer, the instance admits at
// most its share of the cap (max_in_flight / instances, at least one) on
// its own. The local queue's per-instance cap still applies.

var (
	// leaseTTL is how long a lease its instance stopped refreshing lasts.
	leaseTTL = 10 * time.Second
	// leaseWait bounds a request's wait for a lease.
	leaseWait = 30 * time.Second
)

// Polling for a free lease starts at leasePollMin and doubles up to
// leasePollMax.
const (
	leasePollMin = 5 * time.Millisecond
	leasePollMax = 100 * time.Millisecond
)

// acquireLeaseScript drops KEYS[1]'s expired leases, then adds ARGV[2]
// until now + ARGV[3] ms if fewer than ARGV[1] are live: 1 when taken.
var acquireLeaseScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 2)
return 1
`)

// refreshLeasesScript moves the expiry of the leases ARGV[2..] of
// KEYS[1] to now + ARGV[1] ms.
var refreshLeasesScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], now + tonumber(ARGV[1]), ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return 1
`)

// leaseSeq numbers this instance's leases.
var leaseSeq atomic.Uint64

// leases are the leases a sharedStore holds, by tenant, and the slots
// its tenants took locally while the store did not answer.
type leases struct {
	mu    sync.Mutex
	held  map[string]map[string]struct{} // tenant -> lease ids
	local map[string]int                 // tenant -> slots taken without the store
}

// lease is what a request holds of its tenant's max_in_flight.
type lease struct {
	store  *sharedStore
	tenant string
	id     string // "" for a slot taken locally
}

func (s *sharedStore) leaseKey(tenant string) string { return s.prefix + "lease:" + tenant }

// leaseTenant takes a lease for the request's tenant when the tenant has
// a max_in_flight and the handler a shared store, waiting for one as
// above; false with the error to answer when none came in time.
func (h *LLMRoute) leaseTenant(r *http.Request, rc *routeCtx) (apiError, bool) {
	s, tk := h.shared, rc.tk
	if s == nil || tk == nil {
		return apiError{}, true
	}
	limit := tk.ts.limits().maxInFlight
	if limit <= 0 {
		return apiError{}, true
	}
	ctx, cancel := context.WithTimeout(r.Context(), leaseWait)
	defer cancel()
	poll := leasePollMin
	for {
		if l, ok := s.acquireLease(tk.flow, limit); ok {
			rc.lease = l
			return apiError{}, true
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			metricRejected.WithLabelValues("max_in_flight").Inc()
			return rejectError(rejectQueueWait, time.Second), false
		case <-t.C:
		}
		poll = min(2*poll, leasePollMax)
	}
}

// acquireLease takes one of tenant's limit leases in the store, or,
// while the store does not answer, one of the instance's share.
func (s *sharedStore) acquireLease(tenant string, limit int) (*lease, bool) {
	if s.c.available() {
		id := s.id + ":" + strconv.FormatUint(leaseSeq.Add(1), 36)
		ctx, cancel := s.c.ctx()
		n, err := acquireLeaseScript.Run(ctx, s.c.rdb, []string{s.leaseKey(tenant)}, limit, id, leaseTTL.Milliseconds()).Int64()
		cancel()
		if s.c.done("lease_acquire", err) {
			if n != 1 {
				return nil, false
			}
			s.leases.mu.Lock()
			if s.leases.held == nil {
				s.leases.held = map[string]map[string]struct{}{}
			}
			if s.leases.held[tenant] == nil {
				s.leases.held[tenant] = map[string]struct{}{}
			}
			s.leases.held[tenant][id] = struct{}{}
			s.leases.mu.Unlock()
			return &lease{store: s, tenant: tenant, id: id}, true
		}
	}
	metricStoreFallbacks.WithLabelValues("max_in_flight").Inc()
	share := max(1, int(math.Floor(float64(limit)/s.share())))
	s.leases.mu.Lock()
	defer s.leases.mu.Unlock()
	if s.leases.local == nil {
		s.leases.local = map[string]int{}
	}
	if s.leases.local[tenant] >= share {
		return nil, false
	}
	s.leases.local[tenant]++
	return &lease{store: s, tenant: tenant}, true
}

// releaseLease gives back the request's lease (finish) to the store it
// came from (a reload may have changed the handler's since).
func (h *LLMRoute) releaseLease(rc *routeCtx) {
	l := rc.lease
	if l == nil {
		return
	}
	rc.lease = nil
	s := l.store
	s.leases.mu.Lock()
	if l.id == "" {
		s.leases.local[l.tenant]--
		s.leases.mu.Unlock()
		return
	}
	delete(s.leases.held[l.tenant], l.id)
	s.leases.mu.Unlock()
	if !s.c.available() {
		return // it expires within leaseTTL, no longer refreshed
	}
	ctx, cancel := s.c.ctx()
	defer cancel()
	s.c.done("lease_release", s.c.rdb.ZRem(ctx, s.leaseKey(l.tenant), l.id).Err())
}

// refreshLeases renews every lease the instance holds (the heartbeat):
// one script per tenant holding any.
func (s *sharedStore) refreshLeases() {
	s.leases.mu.Lock()
	byTenant := make(map[string][]any, len(s.leases.held))
	for tenant, ids := range s.leases.held {
		if len(ids) == 0 {
			delete(s.leases.held, tenant)
			continue
		}
		args := make([]any, 0, len(ids)+1)
		args = append(args, leaseTTL.Milliseconds())
		for id := range ids {
			args = append(args, id)
		}
		byTenant[tenant] = args
	}
	s.leases.mu.Unlock()
	for tenant, args := range byTenant {
		if !s.c.available() {
			return
		}
		ctx, cancel := s.c.ctx()
		s.c.done("lease_refresh", refreshLeasesScript.Run(ctx, s.c.rdb, []string{s.leaseKey(tenant)}, args...).Err())
		cancel()
	}
}
