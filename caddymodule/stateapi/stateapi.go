// Package stateapi holds the shapes of GET /llm_route/state on Caddy's
// admin address: what the router holds per replica and per live policy. It
// imports nothing of Caddy, so that tests, the soak, the bench and the
// real-engine client read the state with the types the module writes,
// without registering Caddy modules in their binaries.
package stateapi

import (
	"strconv"
	"time"
)

// Path is the admin API path of the state.
const Path = "/llm_route/state"

// State is the body of GET /llm_route/state.
type State struct {
	// Policies are the live llm policies (one per reverse_proxy using it).
	Policies      []Policy  `json:"policies"`
	Replicas      []Replica `json:"replicas"`
	TotalInFlight int       `json:"total_in_flight"`
	Queued        int       `json:"queued"`
	// Tenants are the configured tenants (and any the queue still holds
	// requests of), sorted by name.
	Tenants []Tenant `json:"tenants,omitempty"`
	// Stores are the shared stores (llm_route's shared_store) the running
	// config uses, with their health.
	Stores []Store `json:"shared_stores,omitempty"`
}

// Store is one shared store as this instance sees it.
type Store struct {
	Addr      string `json:"addr"`
	KeyPrefix string `json:"key_prefix"`
	// Up is false while the store is left alone after a failure: the
	// shared features decide on this instance's state.
	Up bool `json:"up"`
	// Errors counts the calls that failed; LastError is the latest one's.
	Errors    uint64 `json:"errors"`
	LastError string `json:"last_error,omitempty"`
	// LastAnswer is when the store last answered.
	LastAnswer *time.Time `json:"last_answer,omitempty"`
	// Instances is how many instances the last heartbeat saw registered.
	Instances int `json:"instances"`
}

// Tenant is one tenant's admission state: its effective settings, its
// requests in flight and waiting, its place in the fair queue and its
// budgets.
type Tenant struct {
	Name        string  `json:"name"`
	Weight      float64 `json:"weight"`
	Priority    string  `json:"priority"`
	MaxInFlight int     `json:"max_in_flight,omitempty"`
	// InFlight counts the tenant's admitted requests not yet ended, Queued
	// those waiting for a slot.
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
	// VirtualTokens is the tenant's virtual time in the fair queue: the
	// tokens it was admitted for, divided by its weight.
	VirtualTokens float64 `json:"virtual_tokens"`
	// RequestsPerMinute and TokensPerMinute are the budgets (0: none);
	// RequestsLeft and TokensLeft what is left of them now (negative after
	// an overrun).
	RequestsPerMinute int     `json:"requests_per_minute,omitempty"`
	RequestsLeft      float64 `json:"requests_left,omitempty"`
	TokensPerMinute   int     `json:"tokens_per_minute,omitempty"`
	TokensLeft        float64 `json:"tokens_left,omitempty"`
	// Reservations counts the budget reservations of requests not yet
	// settled (one per request admitted past the budgets and not ended),
	// ReservedTokens their token estimates.
	Reservations   int     `json:"reservations"`
	ReservedTokens float64 `json:"reserved_tokens"`
	// TokensCharged is every token settled so far; EstimatedExcess what
	// a request is estimated to use beyond its prompt (learned from usage).
	TokensCharged   float64 `json:"tokens_charged"`
	EstimatedExcess float64 `json:"estimated_excess_tokens"`
	// Admitted counts the requests let through the budgets.
	Admitted uint64 `json:"admitted"`
}

// Tenant returns name's entry, if any.
func (s State) Tenant(name string) (Tenant, bool) {
	for _, t := range s.Tenants {
		if t.Name == name {
			return t, true
		}
	}
	return Tenant{}, false
}

// Replica is one replica's entry.
type Replica struct {
	Addr       string     `json:"addr"`
	InFlight   int        `json:"in_flight"`
	Failures   int        `json:"consecutive_failures"`
	Cooling    bool       `json:"cooling"`
	CoolUntil  *time.Time `json:"cooldown_until,omitempty"`
	CoolReason string     `json:"cooldown_reason,omitempty"`
	NeedProbe  bool       `json:"needs_probe"`
	Probing    bool       `json:"probe_in_flight"`
	// Draining is true for a replica that left the upstream set while
	// requests were still in flight on it; it stays listed until they end.
	Draining      bool     `json:"draining,omitempty"`
	IndexEntries  int      `json:"index_entries"`
	IndexCapacity int      `json:"index_capacity"`
	Engine        *Engine  `json:"engine,omitempty"`
	Feedback      Feedback `json:"feedback"`
	// ReportsCached lists the endpoint kinds (chat, completions,
	// responses, messages) for which the replica has reported cached
	// tokens: its silence there now means none cached (cache_report auto).
	ReportsCached []string `json:"reports_cached,omitempty"`
	// Sessions counts the sessions whose last request went to this
	// replica (remembered, not expired).
	Sessions int `json:"sessions"`
}

// Engine is the last scrape of a replica's own metrics.
type Engine struct {
	Engine     string  `json:"engine,omitempty"`
	AgeSeconds float64 `json:"age_seconds"`
	Stale      bool    `json:"stale"`
	Waiting    float64 `json:"waiting"`
	Running    float64 `json:"running"`
	KVUsage    float64 `json:"kv_usage"`
	NumBlocks  int     `json:"num_gpu_blocks,omitempty"`
	Queries    float64 `json:"prefix_cache_queries"`
	Hits       float64 `json:"prefix_cache_hits"`
	BlockSize  int     `json:"block_size,omitempty"`
	LastError  string  `json:"last_error,omitempty"`
}

// Feedback is how the router's predictions fared against the cached
// tokens the engine reported (policies.Belief).
type Feedback struct {
	Checks     int     `json:"checks"`
	Hits       int     `json:"hits"`
	Misses     int     `json:"misses"`
	Partials   int     `json:"partials"`
	Cold       int     `json:"cold"`
	Concurrent int     `json:"concurrent"`
	Precision  float64 `json:"precision"`
	Purges     int     `json:"purges"`
	LastPurge  string  `json:"last_purge_reason,omitempty"`
	MaxIndex   int     `json:"max_index_capacity,omitempty"`
	FromEngine bool    `json:"capacity_from_engine"`
}

// String helps tests print a state.
func (f Feedback) String() string {
	return "checks=" + strconv.Itoa(f.Checks) + " hits=" + strconv.Itoa(f.Hits) + " misses=" + strconv.Itoa(f.Misses) + " partials=" + strconv.Itoa(f.Partials)
}

// Policy is one live `lb_policy llm` with its effective settings
// (defaults filled in), so that a change through the admin API can be
// checked.
type Policy struct {
	Strategy          string        `json:"strategy"`
	MaxInFlight       int           `json:"max_in_flight"`
	QueueSize         int           `json:"queue_size"`
	QueueTimeout      time.Duration `json:"queue_timeout"`
	Queued            int64         `json:"queued"`
	BalanceFactor     float64       `json:"balance_factor"`
	ColdBalanceFactor float64       `json:"cold_balance_factor"`
	LoadSlack         int           `json:"load_slack"`
	SlowStart         time.Duration `json:"slow_start,omitempty"`
	CooldownBase      time.Duration `json:"cooldown_base"`
	CooldownMax       time.Duration `json:"cooldown_max"`
	DialTimeoutFails  int           `json:"dial_timeout_fails"`
	StatusFails       int           `json:"status_fails"`
	EngineMetrics     bool          `json:"engine_metrics"`
	SheddableShare    float64       `json:"sheddable_share"`
	// SlotHold is the slot_hold setting and what it has learned; absent
	// when off.
	SlotHold *SlotHold `json:"slot_hold,omitempty"`
	// Peers is, for prefix_load, whether it treats the replicas as shared
	// with other routers now: "some" or "none" (the peers setting, or
	// what it has inferred from the engines' metrics). A reload's new
	// policy takes over its predecessor's inference at its first route;
	// until then it shows a fresh policy's "some". Absent for the other
	// strategies.
	Peers string `json:"peers,omitempty"`
	// NewPrefixes is, for prefix_load, where a prefix no replica is
	// believed to hold goes now: "home" (its rendezvous home while that is
	// near: with peers and no homes_directory) or "load" (placed by load:
	// alone, with a directory, or once UniqueRun requests in a row found
	// nothing seen before). Absent for the other strategies.
	NewPrefixes string `json:"new_prefixes,omitempty"`
	// QueuedHomes is, for prefix_load sending new prefixes home, whether
	// it does so even while the home's engine reports a waiting queue:
	// the new prefixes it sent home lately found a sixteenth or more of
	// their prompt cached there (placed by other routers), so a prompt
	// placed elsewhere by load would find nothing. Absent when not.
	QueuedHomes bool `json:"queued_homes,omitempty"`
	// UniqueRun is prefix_load's tuning.unique_run (-1: never).
	UniqueRun int `json:"unique_run,omitempty"`
	// Replicas are the addresses of the replicas the policy holds state
	// for (its pool's), sorted.
	Replicas []string `json:"replicas,omitempty"`
}

// SlotHold is a policy's slot_hold: its bound, the estimates its decision
// to wait uses (0 until learned), and the prompts with requests running
// or waiting now. Everything but the bound is shared by the policies
// with slot_hold (one tracker, kept across reloads).
type SlotHold struct {
	Limit time.Duration `json:"limit"`
	// Span is how long a request holds its slot; PrefillPerKiB a miss's
	// time to first byte per KiB of uncached prompt (moving averages).
	Span          time.Duration `json:"span"`
	PrefillPerKiB time.Duration `json:"prefill_per_kib"`
	// Prompts counts the prompts with requests running, Waiting the
	// requests waiting for one of their slots.
	Prompts int `json:"prompts"`
	Waiting int `json:"waiting"`
}

// Replica returns addr's entry, if any.
func (s State) Replica(addr string) (Replica, bool) {
	for _, r := range s.Replicas {
		if r.Addr == addr {
			return r, true
		}
	}
	return Replica{}, false
}

// Idle reports whether no reservation is held, no probe is out and nothing
// is queued, per replica and per tenant (no tenant slot, no budget
// reservation): what every failure test asserts after its case.
func (s State) Idle() bool {
	if s.TotalInFlight != 0 || s.Queued != 0 {
		return false
	}
	for _, r := range s.Replicas {
		if r.InFlight != 0 || r.Probing {
			return false
		}
	}
	for _, t := range s.Tenants {
		if t.InFlight != 0 || t.Queued != 0 || t.Reservations != 0 {
			return false
		}
	}
	return true
}
