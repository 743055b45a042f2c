package caddymodule

import "github.com/llmroute/caddy-llmroute/policies"

// Why a replica was picked, for the access log's llm_reason field. The
// policy knows some reasons itself (a Responses follow-up pinned to the
// replica holding its state, a session sent home, to a new home or moved
// on); any other pick is the strategy's: the rule that decided when the
// strategy names one (prefix_load: history, hot, leading, home, detour,
// load, rendezvous, claimed, least_load), else the strategy's name.
// pickReason is the one place that maps a pick to its reason.

// Pick reasons the policy decides itself.
const (
	// pickPin: the replica holds the response state the request continues.
	pickPin = "pin"
	// pickSession is followed by the session's route: home (the replica
	// that served it last), new (a new session's rendezvous home), moved
	// (home full, cooling, gone or past the load bound).
	pickSession = "session_"
	// pickUntracked: the policy ran without llm_route (no prefix keys).
	pickUntracked = "untracked"
)

// pickReason names why the policy chose a replica: pinned when the
// request is pinned to its state's replica, session the session route
// ("" for none), rule the strategy's rule ("" when it names none); else
// the strategy's name.
func (p *LLMSelection) pickReason(pinned bool, session string, rule policies.Reason) string {
	switch {
	case pinned:
		return pickPin
	case session != "":
		return pickSession + session
	case rule != "":
		return string(rule)
	}
	return p.strategy.Name()
}

// setPick records why the latest attempt's replica was chosen and whether
// the request waited in the queue for it.
func (rc *routeCtx) setPick(reason string, queued bool) {
	rc.mu.Lock()
	rc.pick = reason
	rc.queued = rc.queued || queued
	rc.mu.Unlock()
}

// pickOf returns setPick's record.
func (rc *routeCtx) pickOf() (string, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.pick, rc.queued
}
