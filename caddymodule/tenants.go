package caddymodule

import (
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/jonboulle/clockwork"

	"github.com/llmroute/caddy-llmroute/admission"
)

// Tenants: named clients of llm_route, each with its own keys, its share
// of contended capacity (weight), the highest priority band its requests
// get, a cap on its requests in flight and per-minute budgets. A key
// resolves to its tenant in constant time (auth.go); the tenant's state
// (budgets, output estimate) lives at package level, keyed by name, so
// that it survives a reload like the replicas' state does; the queue
// (waitqueue.go) orders the waiting requests by band, then fairly across
// tenants by weight; budgets.go reserves and settles the budgets.

// Tenant is one named client of llm_route.
type Tenant struct {
	// Keys are the API keys that identify the tenant, presented and
	// resolved like APIKeys (`Authorization: Bearer <key>` or X-Api-Key;
	// {env.*} and {file.*} placeholders resolved when the config loads).
	// A key belongs to one tenant only. Keys are never logged: logs and
	// metrics name the tenant.
	Keys []string `json:"keys,omitempty"`

	// Weight is the tenant's share of the capacity while requests wait for
	// it, relative to the other tenants' weights: a tenant of weight 2 is
	// admitted for twice the tokens of one of weight 1 while both wait.
	// Default 1.
	Weight float64 `json:"weight,omitempty"`

	// Priority is the highest band the tenant's requests get: critical,
	// standard (the default) or sheddable. Waiting requests of a higher
	// band always go first; sheddable ones are admitted only below the
	// pool's sheddable_share and are displaced from a full queue by any
	// other. A request may ask for a lower band with the
	// X-LLMRoute-Priority header, never for a higher one.
	Priority string `json:"priority,omitempty"`

	// MaxInFlight caps the tenant's requests in flight across the whole
	// pool, on this router instance; more wait in the queue while the
	// other tenants are admitted past them. With llm_route's shared_store
	// the cap holds across the instances too (a lease per request). 0
	// (the default) means no cap.
	MaxInFlight int `json:"max_in_flight,omitempty"`

	// RequestsPerMinute is the tenant's request budget on this router
	// instance, or across the instances sharing llm_route's shared_store
	// (each takes its share while the store does not answer): a minute's
	// worth at once, refilled continuously. A request
	// past it gets 429 rate_limit_exceeded with Retry-After at once. A
	// request llmroute refused without sending it to a replica (queue
	// full, queue timeout) is given back. 0 (the default) means none.
	RequestsPerMinute int `json:"requests_per_minute,omitempty"`

	// TokensPerMinute is the tenant's token budget (prompt and output
	// tokens) on this router instance (or shared), held like
	// RequestsPerMinute. A
	// request reserves an estimate at admission (its prompt at
	// policies.BytesPerToken bytes per token, plus what the tenant's recent
	// requests used beyond their prompt) and is charged at its end what
	// the engine reported in its usage (turn on request_usage so that
	// streams report it); a stream without usage, or cut midway, is
	// charged its prompt estimate and one token per chunk it streamed. A
	// request is admitted only while its estimate fits, so the budget is
	// overrun only by what requests used beyond their estimate. 0 (the
	// default) means none.
	TokensPerMinute int `json:"tokens_per_minute,omitempty"`
}

// defaultTenant names the tenant of APIKeys, and of every request when no
// key is configured.
const defaultTenant = "default"

// tenantName is what a tenant may be called: it is a metrics label and a
// log field.
var tenantName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// tenantLimits are a tenant's settings with the defaults filled in.
type tenantLimits struct {
	weight      float64
	ceiling     admission.Priority
	maxInFlight int
	rpm, tpm    int
}

// limits validates t (nil: every default) and fills in the defaults.
func (t *Tenant) limits() (tenantLimits, error) {
	l := tenantLimits{weight: 1, ceiling: admission.Standard}
	if t == nil {
		return l, nil
	}
	if t.Weight < 0 || t.MaxInFlight < 0 || t.RequestsPerMinute < 0 || t.TokensPerMinute < 0 {
		return l, fmt.Errorf("weight, max_in_flight, requests_per_minute and tokens_per_minute must be >= 0")
	}
	if t.Weight > 0 {
		l.weight = t.Weight
	}
	if t.Priority != "" {
		p, ok := admission.ParsePriority(t.Priority)
		if !ok {
			return l, fmt.Errorf("priority must be critical, standard or sheddable, got %q", t.Priority)
		}
		l.ceiling = p
	}
	l.maxInFlight, l.rpm, l.tpm = t.MaxInFlight, t.RequestsPerMinute, t.TokensPerMinute
	return l, nil
}

// tenantNames returns the configured tenants' names, the default first,
// then the others sorted (key order decides nothing, but it stays fixed).
func (h *LLMRoute) tenantNames() []string {
	names := []string{defaultTenant}
	for n := range h.Tenants {
		if n != defaultTenant {
			names = append(names, n)
		}
	}
	sort.Strings(names[1:])
	return names
}

// validateTenants checks every tenant's name and settings.
func (h *LLMRoute) validateTenants() error {
	for _, n := range h.tenantNames() {
		t := h.Tenants[n]
		if n != defaultTenant && !tenantName.MatchString(n) {
			return fmt.Errorf("tenant %q: a name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", n)
		}
		if n != defaultTenant && (t == nil || len(t.Keys) == 0) {
			return fmt.Errorf("tenant %q has no keys", n)
		}
		if _, err := t.limits(); err != nil {
			return fmt.Errorf("tenant %q: %v", n, err)
		}
	}
	return nil
}

// provisionTenants resolves the tenants' keys (after resolveKeys, whose
// keys are the default tenant's), checks that no key belongs to two
// tenants, and takes this handler's reference on each tenant's state,
// registering its settings there: the newest config's settings decide, so
// a reload (a PATCH of a weight or a limit) takes effect at once for
// queued and new requests alike, and a reload that fails hands back to
// the config before it.
func (h *LLMRoute) provisionTenants(repl *caddy.Replacer, clk clockwork.Clock) error {
	if err := h.validateTenants(); err != nil {
		return err
	}
	names := h.tenantNames()
	h.keyTenant = make([]int, len(h.keyHashes)) // APIKeys: the default tenant
	seen := make(map[[32]byte]string, len(h.keyHashes))
	for _, sum := range h.keyHashes {
		seen[sum] = defaultTenant
	}
	lims := make([]tenantLimits, len(names))
	for i, n := range names {
		t := h.Tenants[n]
		lims[i], _ = t.limits()
		if t == nil {
			continue
		}
		for j, k := range t.Keys {
			sum, err := resolveKey(repl, k)
			if err != nil {
				return fmt.Errorf("tenant %q keys[%d]: %v", n, j, err)
			}
			if other, dup := seen[sum]; dup {
				return fmt.Errorf("tenant %q keys[%d]: the same key belongs to %q", n, j, other)
			}
			seen[sum] = n
			h.keyHashes = append(h.keyHashes, sum)
			h.keyTenant = append(h.keyTenant, i)
		}
	}
	h.tenants = make([]*tenantState, 0, len(names))
	for i, n := range names {
		ts := acquireTenant(n, clk)
		h.tenants = append(h.tenants, ts)
		ts.register(h, lims[i])
	}
	return nil
}

// Cleanup drops this handler's references on its tenants' states: the
// settings it registered stop counting (a newer config's stay), and a
// tenant no config names any more is forgotten. The handler keeps its
// keys and tenants: a reload cleans the old config up while it may still
// serve a request it had begun to read, and that request must meet the
// same keys, budgets and queue as any other (see cleanupOnce).
func (h *LLMRoute) Cleanup() error {
	if !h.cleanupOnce() {
		return nil
	}
	for _, ts := range h.tenants {
		ts.unregister(h)
		releaseTenant(ts.name)
	}
	h.releaseShared()
	return nil
}

// tenantOf returns the tenant r authenticates as; false when keys are
// configured and r carries none of them (401). A handler set up without
// Provision (tests) has no tenants: nil, and no tenant accounting.
func (h *LLMRoute) tenantOf(r *http.Request) (*tenantState, bool) {
	i, ok := -1, true
	if len(h.keyHashes) > 0 {
		i, ok = h.authorized(r)
	}
	switch {
	case !ok:
		return nil, false
	case len(h.tenants) == 0:
		return nil, true
	case i < 0:
		return h.tenants[0], true
	}
	return h.tenants[h.keyTenant[i]], true
}

// tenantClock is the clock of the tenants' budgets (tests set a fake one).
var tenantClock clockwork.Clock = clockwork.NewRealClock()

// tenantStates holds every configured tenant's state, keyed by name, with
// a reference per llm_route handler that names it: a reload's new config
// takes its references in Provision, before the old one's Cleanup drops
// theirs, so budgets and estimates carry over. A tenant name means one
// tenant across the config's llm_route handlers.
var tenantStates = caddy.NewUsagePool()

// tenantState is what llmroute keeps of one tenant across reloads. Its
// place in the queue (in flight, virtual time) is the queue's
// (waitqueue.go, keyed by the same name).
type tenantState struct {
	name string
	clk  clockwork.Clock

	mu sync.Mutex
	// regs are the settings of the live handlers that name the tenant,
	// oldest first; the newest decide (lim).
	regs []tenantReg
	lim  tenantLimits
	// rpm and tpm are the per-minute budgets; est the learned output.
	rpm, tpm *admission.Bucket
	est      admission.Estimate
	// charged counts the tokens settled, admitted the requests let
	// through the budgets.
	charged  float64
	admitted uint64
	// requests (by band) and tokens are the tenant's children of
	// metricTenantRequests and metricTenantTokens.
	requests [admission.Critical + 1]counterSlot
	tokens   counterSlot
}

// tenantReg is one handler's settings for the tenant.
type tenantReg struct {
	owner *LLMRoute
	lim   tenantLimits
}

// acquireTenant returns name's state, taking one reference; a state it
// creates runs on clk.
func acquireTenant(name string, clk clockwork.Clock) *tenantState {
	v, _, _ := tenantStates.LoadOrNew(name, func() (caddy.Destructor, error) {
		now := clk.Now()
		return &tenantState{name: name, clk: clk, lim: tenantLimits{weight: 1, ceiling: admission.Standard},
			rpm: admission.NewBucket(0, now), tpm: admission.NewBucket(0, now)}, nil
	})
	return v.(*tenantState)
}

// releaseTenant drops one reference on name's state.
func releaseTenant(name string) { _, _ = tenantStates.Delete(name) }

// Destruct implements caddy.Destructor. The queue keeps the tenant's
// virtual time (a tenant configured again resumes its turn, not ahead of
// the others).
func (ts *tenantState) Destruct() error { return nil }

// register records owner's settings for the tenant; they are the newest.
func (ts *tenantState) register(owner *LLMRoute, lim tenantLimits) {
	ts.mu.Lock()
	ts.regs = append(ts.regs, tenantReg{owner: owner, lim: lim})
	ts.applyLocked()
	ts.mu.Unlock()
	ts.configureQueue()
}

// unregister drops owner's settings; the newest remaining ones decide.
func (ts *tenantState) unregister(owner *LLMRoute) {
	ts.mu.Lock()
	for i, r := range ts.regs {
		if r.owner == owner {
			ts.regs = append(ts.regs[:i], ts.regs[i+1:]...)
			break
		}
	}
	changed := len(ts.regs) > 0
	if changed {
		ts.applyLocked()
	}
	ts.mu.Unlock()
	if changed {
		ts.configureQueue()
	}
}

// applyLocked makes the newest registration's settings the tenant's.
func (ts *tenantState) applyLocked() {
	ts.lim = ts.regs[len(ts.regs)-1].lim
	now := ts.clk.Now()
	ts.rpm.SetLimit(float64(ts.lim.rpm), now)
	ts.tpm.SetLimit(float64(ts.lim.tpm), now)
}

// configureQueue passes the weight and cap to the queue; a raised cap or
// a weight change lets waiting requests look again.
func (ts *tenantState) configureQueue() {
	ts.mu.Lock()
	cfg := admission.Flow{Weight: ts.lim.weight, MaxInFlight: ts.lim.maxInFlight}
	ts.mu.Unlock()
	waiters.configure(ts.name, cfg)
}

// limits returns the tenant's settings now.
func (ts *tenantState) limits() tenantLimits {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.lim
}

// Interface guards
var (
	_ caddy.CleanerUpper = (*LLMRoute)(nil)
	_ caddy.Destructor   = (*tenantState)(nil)
)
