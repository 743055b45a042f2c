package caddymodule

import (
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/llmroute/caddy-llmroute/admission"
)

// The tenants' requests_per_minute and tokens_per_minute as global
// budgets. With a shared store, a tenant's two token buckets live in the
// store, with admission.Bucket's rules (a minute's worth at once,
// refilled continuously, a reservation admitted only while it fits, the
// difference settled at the end), so that every instance draws on the
// same budget. A decision is one script (both buckets, one round trip, on
// the store's clock), and so is a settlement.
//
// While the store does not answer, a request is reserved in the tenant's
// local buckets with each unit counting once per instance that shares the
// store (the count the last heartbeat saw): each instance then admits at
// most its share, limit / instances, and together they stay within the
// limit (docs/scaling.md).

// budgetTTL is how long an untouched bucket is kept in the store: a
// minute refills it, so a bucket gone is a full one.
const budgetTTL = 2 * time.Minute

// reserveScript reserves 1 request in KEYS[1] (limit ARGV[1]) and ARGV[3]
// tokens in KEYS[2] (limit ARGV[2]); a limit of 0 is no bucket. It
// answers {1} when admitted, else {0, which ("r" or "t"), milliseconds
// until it would fit}.
var reserveScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[4])
local function level(key, limit)
  if limit <= 0 then return nil end
  local v = redis.call('HMGET', key, 'l', 't')
  local l, at = tonumber(v[1]), tonumber(v[2])
  if l == nil or at == nil then return limit end
  if now > at then l = l + limit * (now - at) / 60000 end
  return math.min(l, limit)
end
local rl, tl, n = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local r, k = level(KEYS[1], rl), level(KEYS[2], tl)
if r and r + 1e-6 < math.min(1, rl) then
  return {0, 'r', tostring(math.ceil((math.min(1, rl) - r) / rl * 60000))}
end
if k and k + 1e-6 < math.min(n, tl) then
  return {0, 't', tostring(math.ceil((math.min(n, tl) - k) / tl * 60000))}
end
if r then
  redis.call('HSET', KEYS[1], 'l', tostring(r - 1), 't', now)
  redis.call('PEXPIRE', KEYS[1], ttl)
end
if k then
  redis.call('HSET', KEYS[2], 'l', tostring(k - n), 't', now)
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {1}
`)

// settleScript adds ARGV[3] to KEYS[1] (limit ARGV[1]) and ARGV[4] to
// KEYS[2] (limit ARGV[2]): what a request reserved and did not use (or,
// negative, used beyond its reservation).
var settleScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[5])
local function settle(key, limit, d)
  if limit <= 0 or d == 0 then return end
  local v = redis.call('HMGET', key, 'l', 't')
  local l, at = tonumber(v[1]), tonumber(v[2])
  if l == nil or at == nil then l, at = limit, now end
  if now > at then l = l + limit * (now - at) / 60000 end
  l = math.min(l + d, limit)
  redis.call('HSET', key, 'l', tostring(l), 't', now)
  redis.call('PEXPIRE', key, ttl)
end
settle(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[3]))
settle(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[4]))
return 1
`)

// budgetKeys are the tenant's buckets in the store.
func (s *sharedStore) budgetKeys(tenant string) []string {
	return []string{s.prefix + "budget:" + tenant + ":rpm", s.prefix + "budget:" + tenant + ":tpm"}
}

// reserveTenant reserves a request against its tenant's budgets: in the
// shared store when there is one and it answers, else locally (at the
// instance's share while a store does not answer).
func (h *LLMRoute) reserveTenant(ts *tenantState, lim tenantLimits, promptBytes int, hasBody bool) (*ticket, string, time.Duration) {
	s := h.shared
	if s == nil || (lim.rpm <= 0 && lim.tpm <= 0) {
		return ts.reserve(promptBytes, hasBody)
	}
	if !s.c.available() {
		metricStoreFallbacks.WithLabelValues("budgets").Inc()
		return ts.reserveScaled(promptBytes, hasBody, s.share())
	}
	ts.mu.Lock()
	tk := &ticket{ts: ts, flow: ts.name, promptBytes: promptBytes, promptEst: admission.PromptTokens(promptBytes), shared: true}
	tk.cost = tk.promptEst
	if hasBody {
		tk.cost = ts.est.Tokens(promptBytes)
		tk.tokens = tk.cost
	}
	ts.mu.Unlock()
	ctx, cancel := s.c.ctx()
	defer cancel()
	res, err := reserveScript.Run(ctx, s.c.rdb, s.budgetKeys(ts.name), lim.rpm, lim.tpm, tk.tokens, budgetTTL.Milliseconds()).Slice()
	var ok, valid bool
	var why string
	var wait time.Duration
	if err == nil {
		if ok, why, wait, valid = reserveAnswer(res); !valid {
			err = errBadAnswer
		}
	}
	if !s.c.done("budget_reserve", err) {
		metricStoreFallbacks.WithLabelValues("budgets").Inc()
		return ts.reserveScaled(promptBytes, hasBody, s.share())
	}
	if !ok {
		return nil, why, wait
	}
	ts.mu.Lock()
	ts.admitted++
	ts.mu.Unlock()
	return tk, "", 0
}

// reserveAnswer reads reserveScript's answer; valid is false for one it
// cannot have given.
func reserveAnswer(res []any) (ok bool, why string, wait time.Duration, valid bool) {
	if len(res) == 1 {
		n, isInt := res[0].(int64)
		return n == 1, "", 0, isInt && n == 1
	}
	if len(res) != 3 {
		return false, "", 0, false
	}
	which, _ := res[1].(string)
	ms, _ := res[2].(string)
	d, err := time.ParseDuration(ms + "ms")
	if err != nil || d < 0 {
		return false, "", 0, false
	}
	switch which {
	case "r":
		return false, reasonRPM, d, true
	case "t":
		return false, reasonTPM, d, true
	}
	return false, "", 0, false
}

// settleShared settles a ticket reserved in the store: the request
// counts if it was sent, and the tokens it used replace its estimate. A
// settlement the store does not take is lost (counted as an error): the
// budget keeps the request's estimate.
func (h *LLMRoute) settleShared(tk *ticket, sent bool, used float64) {
	s := h.shared
	if s == nil || !s.c.available() {
		metricStoreFallbacks.WithLabelValues("budgets").Inc()
		return
	}
	lim := tk.ts.limits()
	dr := 1.0
	if sent {
		dr = 0
	}
	dt := tk.tokens - used
	if dr == 0 && dt == 0 {
		return
	}
	ctx, cancel := s.c.ctx()
	defer cancel()
	err := settleScript.Run(ctx, s.c.rdb, s.budgetKeys(tk.ts.name), lim.rpm, lim.tpm, dr, dt, budgetTTL.Milliseconds()).Err()
	if !s.c.done("budget_settle", err) {
		metricStoreFallbacks.WithLabelValues("budgets").Inc()
	}
}
