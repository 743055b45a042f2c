package admission

import (
	"math"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/stats"
	"github.com/llmroute/caddy-llmroute/policies"
)

// Bucket is a per-minute budget (requests or tokens) as a token bucket. It
// holds at most one minute's worth, Limit, starts full and refills
// continuously at Limit per minute, so that over any window of t minutes
// at most Limit x (1 + t) is admitted: a full minute's burst, then the
// rate.
//
// A request reserves its estimate at admission and settles at its end:
// what it did not use goes back, what it used beyond the estimate is taken
// (the level may go below zero: a debt the next requests wait out). A
// reservation is admitted only when the estimate fits in what is left, so
// the budget is overrun only by the requests whose use exceeded their
// estimate, each by that excess, never by a whole request admitted past
// the limit. One estimate larger than the whole Limit is admitted only
// from a full bucket (else it could never run).
//
// A zero Limit means no budget: every reservation is admitted and only
// counted. A Bucket is not safe for concurrent use.
type Bucket struct {
	// Inputs
	limit float64

	// Internal data
	level        float64 // what is left now; below zero after an overrun
	at           time.Time
	reserved     float64 // the estimates of reservations not yet settled
	reservations int
}

// NewBucket returns a full bucket of limit per minute at now.
func NewBucket(limit float64, now time.Time) *Bucket {
	b := &Bucket{at: now}
	b.SetLimit(limit, now)
	return b
}

// Limit returns the budget per minute (0: none).
func (b *Bucket) Limit() float64 { return b.limit }

// SetLimit changes the budget per minute, keeping what was spent: raising
// a limit from 100 to 150 with 30 left leaves 80. A bucket that had no
// limit starts full.
func (b *Bucket) SetLimit(limit float64, now time.Time) {
	b.refill(now)
	switch {
	case limit <= 0:
		b.limit, b.level = 0, 0
	case b.limit <= 0:
		b.limit, b.level = limit, limit
	default:
		b.level = math.Min(b.level+limit-b.limit, limit)
		b.limit = limit
	}
}

// refill brings the level up to date.
func (b *Bucket) refill(now time.Time) {
	if now.After(b.at) {
		if b.limit > 0 {
			b.level = math.Min(b.level+b.limit*now.Sub(b.at).Minutes(), b.limit)
		}
		b.at = now
	}
}

// reserveSlack absorbs float rounding in the comparison of the level with
// an estimate (a refill computed from nanoseconds).
const reserveSlack = 1e-6

// Reserve takes n for a request at now. It returns false and how long
// until n would fit when it does not.
func (b *Bucket) Reserve(n float64, now time.Time) (bool, time.Duration) {
	b.refill(now)
	if b.limit > 0 {
		need := math.Min(n, b.limit)
		if b.level+reserveSlack < need {
			return false, b.until(need)
		}
		b.level -= n
	}
	b.reserved += n
	b.reservations++
	return true, 0
}

// until returns how long the bucket takes to refill to need.
func (b *Bucket) until(need float64) time.Duration {
	minutes := (need - b.level) / b.limit
	return time.Duration(math.Ceil(minutes * float64(time.Minute)))
}

// Settle ends a reservation of reserved with what the request used.
func (b *Bucket) Settle(reserved, used float64, now time.Time) {
	b.refill(now)
	if b.limit > 0 {
		b.level = math.Min(b.level+reserved-used, b.limit)
	}
	b.reserved -= reserved
	b.reservations--
	if b.reservations <= 0 {
		b.reserved, b.reservations = 0, 0
	}
}

// Refill fills the bucket to its limit at now, forgetting what was spent
// (an operator's remedy for a debt a faulty charge left). Reservations not
// yet settled stay counted and settle as usual.
func (b *Bucket) Refill(now time.Time) {
	b.refill(now)
	if b.limit > 0 {
		b.level = b.limit
	}
}

// Available returns what is left at now (negative: the debt of an overrun).
func (b *Bucket) Available(now time.Time) float64 {
	b.refill(now)
	return b.level
}

// Reservations returns the number of reservations not yet settled and the
// sum of their estimates.
func (b *Bucket) Reservations() (int, float64) { return b.reservations, b.reserved }

// PromptTokens is the token estimate of a prompt of the given canonical
// bytes: bytes / policies.BytesPerToken, rounded up (the router has no
// tokenizer; the residency index makes the same estimate).
func PromptTokens(bytes int) float64 {
	if bytes <= 0 {
		return 0
	}
	return math.Ceil(float64(bytes) / policies.BytesPerToken)
}

// estimateGain is the weight of the newest request in an Estimate: an
// eighth, so it follows a change of workload within a dozen requests and
// one long answer moves it by an eighth of its length.
const estimateGain = 1.0 / 8

// Estimate learns what a tenant's requests use beyond their prompt
// estimate (their output, mostly, and the error of the bytes-per-token
// guess, either way), so that a reservation covers the whole request and
// not just its prompt: with requests of one shape the budget is then
// overrun by the noise of that shape, not by every concurrent request's
// whole output, and the fair queue's virtual time is charged what the
// requests will use, not a biased guess that the corrections at their end
// (Queue.Settle) would have to undo. It starts at zero (the first requests
// reserve their prompt only) and follows an exponentially weighted mean of
// the settled difference.
type Estimate struct {
	excess stats.EWMA
}

// Tokens is the estimate for a request whose prompt has promptBytes (never
// below zero).
func (e *Estimate) Tokens(promptBytes int) float64 {
	return math.Max(PromptTokens(promptBytes)+e.excess.Value(), 0)
}

// Excess returns the learned tokens beyond the prompt estimate (negative
// when the prompt estimate runs high).
func (e *Estimate) Excess() float64 { return e.excess.Value() }

// Observe learns from a request whose prompt had promptBytes and which
// used used tokens as the engine reported them.
func (e *Estimate) Observe(promptBytes int, used float64) {
	e.excess.Add(used-PromptTokens(promptBytes), estimateGain)
}

// SheddableAllowed reports whether a sheddable request may take one more
// of a pool's caps slots, used of them taken: only while the pool stays,
// with it, within share of its caps. Sheddable traffic so never takes the
// last (1 - share) of the capacity, which stays for standard and critical
// requests arriving in a burst. A pool without caps (caps 0) always
// allows.
func SheddableAllowed(used, caps int, share float64) bool {
	if caps <= 0 {
		return true
	}
	return float64(used+1) <= share*float64(caps)+reserveSlack
}
