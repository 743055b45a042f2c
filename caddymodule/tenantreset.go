package caddymodule

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/llmroute/caddy-llmroute/admission"
)

// Resetting a tenant: POST /llm_route/tenants/<name>/reset on the admin
// API gives the tenant a fresh start, for when its accounting went wrong
// (an engine's usage charged it far more than it used): its per-minute
// budgets are full again, its learned output estimate is forgotten and
// its virtual time in the queue starts at the lowest of the tenants
// waiting (zero when none waits). Its requests in flight and waiting are
// left alone and settle as usual; its settings are the config's.

// tenantsAdminPath is the admin API path below which tenants are
// addressed.
const tenantsAdminPath = "/llm_route/tenants/"

// serveTenantReset answers POST /llm_route/tenants/<name>/reset.
func serveTenantReset(w http.ResponseWriter, r *http.Request) error {
	name, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, tenantsAdminPath), "/reset")
	if !ok || name == "" || strings.Contains(name, "/") {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Message: "use POST " + tenantsAdminPath + "<name>/reset"}
	}
	if r.Method != http.MethodPost {
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Message: "method not allowed"}
	}
	v, found := tenantStates.References(name)
	if !found || v == 0 {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Message: "no configured tenant of that name"}
	}
	ts := acquireTenant(name, tenantClock)
	defer releaseTenant(name)
	ts.reset()
	waiters.resetFlow(name)
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(ts.status())
}

// reset fills the tenant's budgets and forgets its learned estimate.
func (ts *tenantState) reset() {
	now := ts.clk.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.rpm.Refill(now)
	ts.tpm.Refill(now)
	ts.est = admission.Estimate{}
}

// resetFlow starts the flow's virtual time afresh (admission.Queue.Reset);
// waiters may look again.
func (s *scheduler) resetFlow(flow string) {
	s.mu.Lock()
	s.q.Reset(flow)
	s.mu.Unlock()
	s.kick(false, false)
}
