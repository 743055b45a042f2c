package caddymodule

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/caddyserver/caddy/v2"
)

func init() {
	caddy.RegisterModule(adminState{})
}

// adminState adds GET /llm_route/state to Caddy's admin API: per replica
// the reservations held, the cooldown, the last engine metrics and their
// age, and the residency index size. Tests and operators read leaks here.
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
		Pattern: "/llm_route/state",
		Handler: caddy.AdminHandlerFunc(serveState),
	}}
}

// ReplicaStatus is one replica's entry in /llm_route/state.
type ReplicaStatus struct {
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
	Draining      bool              `json:"draining,omitempty"`
	IndexEntries  int               `json:"index_entries"`
	IndexCapacity int               `json:"index_capacity"`
	Engine        *EngineLoadStatus `json:"engine,omitempty"`
	Feedback      FeedbackStatus    `json:"feedback"`
}

// PolicyStatus is one live `lb_policy llm` with its effective settings
// (defaults filled in), so that a change through the admin API can be
// checked.
type PolicyStatus struct {
	Strategy          string         `json:"strategy"`
	MaxInFlight       int            `json:"max_in_flight"`
	QueueSize         int            `json:"queue_size"`
	QueueTimeout      caddy.Duration `json:"queue_timeout"`
	Queued            int64          `json:"queued"`
	BalanceFactor     float64        `json:"balance_factor"`
	ColdBalanceFactor float64        `json:"cold_balance_factor"`
	LoadSlack         int            `json:"load_slack"`
	ColdChoices       int            `json:"cold_choices"`
	SlowStart         caddy.Duration `json:"slow_start,omitempty"`
	CooldownBase      caddy.Duration `json:"cooldown_base"`
	CooldownMax       caddy.Duration `json:"cooldown_max"`
	DialTimeoutFails  int            `json:"dial_timeout_fails"`
	EngineMetrics     bool           `json:"engine_metrics"`
}

// RouterState is the body of GET /llm_route/state.
type RouterState struct {
	// Policies are the live llm policies (one per reverse_proxy using it).
	Policies      []PolicyStatus  `json:"policies"`
	Replicas      []ReplicaStatus `json:"replicas"`
	TotalInFlight int             `json:"total_in_flight"`
	Queued        int             `json:"queued"`
}

func serveState(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Message: "method not allowed"}
	}
	st := RouterState{Policies: snapshotPolicies(), Replicas: snapshotReplicas(), Queued: waiters.len()}
	for _, s := range st.Replicas {
		st.TotalInFlight += s.InFlight
	}
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(st)
}

// snapshotPolicies returns the live policies' effective settings.
func snapshotPolicies() []PolicyStatus {
	livePolicies.Lock()
	defer livePolicies.Unlock()
	out := make([]PolicyStatus, 0, len(livePolicies.list))
	for _, p := range livePolicies.list {
		out = append(out, PolicyStatus{
			Strategy: p.strategy.Name(), MaxInFlight: p.MaxInFlight, QueueSize: p.QueueSize,
			QueueTimeout: p.QueueTimeout, Queued: p.queued.Load(),
			BalanceFactor: p.opts.BalanceFactor, ColdBalanceFactor: p.opts.ColdBalanceFactor,
			LoadSlack: p.opts.LoadSlack, ColdChoices: p.opts.ColdChoices,
			SlowStart: p.SlowStart, CooldownBase: p.CooldownBase, CooldownMax: p.CooldownMax,
			DialTimeoutFails: p.DialTimeoutFails, EngineMetrics: p.EngineMetrics != nil,
		})
	}
	return out
}

// snapshotReplicas returns every known replica's status, sorted by address.
func snapshotReplicas() []ReplicaStatus {
	now := time.Now()
	var out []ReplicaStatus
	replicas.Range(func(_, v any) bool {
		s := v.(*replicaState)
		s.mu.Lock()
		rs := ReplicaStatus{
			Addr: s.addr, InFlight: s.inFlight, Failures: s.failures,
			Cooling: now.Before(s.coolUntil), CoolReason: s.coolReason,
			NeedProbe: s.needProbe, Probing: s.probing, Draining: s.drainRefs > 0,
			Engine:   s.engine.status(now),
			Feedback: s.feedback.status(),
		}
		if rs.Cooling {
			t := s.coolUntil
			rs.CoolUntil = &t
		}
		s.mu.Unlock()
		rs.IndexEntries, rs.IndexCapacity = s.index.Len(), s.index.Capacity()
		out = append(out, rs)
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// Interface guards
var _ caddy.AdminRouter = (*adminState)(nil)
