package caddymodule

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/policies"
)

func init() {
	caddy.RegisterModule(adminState{})
}

// adminState adds GET /llm_route/state to Caddy's admin API (and POST
// /llm_route/tenants/<name>/reset, tenantreset.go): per replica
// the reservations held, the cooldown, the last engine metrics and their
// age, the residency index size and the prediction record; per live policy
// its effective settings. Tests and operators read leaks here. The shapes
// are in package stateapi, which readers import without Caddy.
type adminState struct{}

// CaddyModule returns the Caddy module information.
func (adminState) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.llm_route",
		New: func() caddy.Module { return new(adminState) },
	}
}

// Routes returns the admin routes.
func (adminState) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{
		Pattern: stateapi.Path,
		Handler: caddy.AdminHandlerFunc(serveState),
	}, {
		Pattern: tenantsAdminPath,
		Handler: caddy.AdminHandlerFunc(serveTenantReset), // tenantreset.go
	}}
}

func serveState(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Message: "method not allowed"}
	}
	st := stateapi.State{Policies: snapshotPolicies(), Replicas: snapshotReplicas(), Queued: waiters.len(), Tenants: snapshotTenants(), Stores: snapshotStores()}
	for _, s := range st.Replicas {
		st.TotalInFlight += s.InFlight
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(st)
}

// snapshotPolicies returns the live policies' effective settings.
func snapshotPolicies() []stateapi.Policy {
	livePolicies.Lock()
	defer livePolicies.Unlock()
	out := make([]stateapi.Policy, 0, len(livePolicies.list))
	for _, p := range livePolicies.list {
		out = append(out, p.status())
	}
	return out
}

// status is the policy's entry in /llm_route/state.
func (p *LLMSelection) status() stateapi.Policy {
	peers, fresh, queued, run := "", "", false, 0
	if ps, ok := p.strategy.(policies.PeerSensor); ok {
		peers = map[bool]string{false: "none", true: "some"}[ps.Peers()]
		fresh = map[bool]string{false: "load", true: "home"}[ps.HomesNewPrefixes()]
		queued = ps.QueuedHomes()
		run = p.opts.UniqueRun
	}
	return stateapi.Policy{
		Strategy: p.strategy.Name(), MaxInFlight: p.MaxInFlight, QueueSize: p.QueueSize,
		QueueTimeout: time.Duration(p.QueueTimeout), Queued: p.queued.Load(),
		BalanceFactor: p.opts.BalanceFactor, ColdBalanceFactor: p.opts.ColdBalanceFactor,
		LoadSlack: p.opts.LoadSlack,
		SlowStart: time.Duration(p.SlowStart), CooldownBase: time.Duration(p.CooldownBase),
		CooldownMax:      time.Duration(p.CooldownMax),
		DialTimeoutFails: p.DialTimeoutFails, StatusFails: p.StatusFails, EngineMetrics: p.EngineMetrics != nil,
		SheddableShare: p.SheddableShare, SlotHold: p.holds.status(time.Duration(p.SlotHold)),
		Peers: peers, NewPrefixes: fresh, QueuedHomes: queued, UniqueRun: run, Replicas: p.replicaAddrs(),
	}
}

// snapshotReplicas returns every known replica's status, sorted by address.
func snapshotReplicas() []stateapi.Replica {
	var out []stateapi.Replica
	sessions := sessionsPerReplica()
	replicas.Range(func(_, v any) bool {
		rs := v.(*replicaState).status()
		rs.Sessions = sessions[rs.Addr]
		out = append(out, rs)
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// status is the replica's entry in /llm_route/state.
func (s *replicaState) status() stateapi.Replica {
	now := s.clk.Now()
	s.mu.Lock()
	rs := stateapi.Replica{
		Addr: s.addr, InFlight: s.inFlight, Failures: s.failures,
		Cooling: now.Before(s.coolUntil), CoolReason: s.coolReason,
		NeedProbe: s.needProbe, Probing: s.probing, Draining: s.drainRefs > 0,
		Engine: s.engine.status(now),
	}
	if rs.Cooling {
		t := s.coolUntil
		rs.CoolUntil = &t
	}
	s.mu.Unlock()
	rs.Feedback = feedbackStatus(s.belief.Stats())
	rs.ReportsCached = s.reports.kinds()
	ix := s.belief.Index()
	rs.IndexEntries, rs.IndexCapacity = ix.Len(), ix.Capacity()
	return rs
}

// snapshotTenants returns every configured tenant's admission state, and
// that of any tenant the queue still counts requests of (so that a leak
// shows even after its config is gone), sorted by name.
func snapshotTenants() []stateapi.Tenant {
	byName := map[string]*stateapi.Tenant{}
	tenantStates.Range(func(_, v any) bool {
		t := v.(*tenantState).status()
		byName[t.Name] = &t
		return true
	})
	for _, f := range waiters.flows() {
		t, ok := byName[f.name]
		if !ok {
			if f.InFlight == 0 && f.Queued == 0 {
				continue
			}
			t = &stateapi.Tenant{Name: f.name, Weight: f.Weight, Priority: "standard", MaxInFlight: f.MaxInFlight}
			byName[f.name] = t
		}
		t.InFlight, t.Queued, t.VirtualTokens = f.InFlight, f.Queued, f.Counter
	}
	out := make([]stateapi.Tenant, 0, len(byName))
	for _, t := range byName {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// status is the tenant's entry in /llm_route/state, less its place in the
// queue (snapshotTenants adds it).
func (ts *tenantState) status() stateapi.Tenant {
	now := ts.clk.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := stateapi.Tenant{Name: ts.name, Weight: ts.lim.weight, Priority: ts.lim.ceiling.String(), MaxInFlight: ts.lim.maxInFlight,
		RequestsPerMinute: ts.lim.rpm, TokensPerMinute: ts.lim.tpm, TokensCharged: ts.charged,
		EstimatedExcess: ts.est.Excess(), Admitted: ts.admitted}
	if ts.lim.rpm > 0 {
		t.RequestsLeft = ts.rpm.Available(now)
	}
	if ts.lim.tpm > 0 {
		t.TokensLeft = ts.tpm.Available(now)
	}
	t.Reservations, _ = ts.rpm.Reservations()
	_, t.ReservedTokens = ts.tpm.Reservations()
	return t
}

// Interface guards
var _ caddy.AdminRouter = (*adminState)(nil)
