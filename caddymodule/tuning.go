package caddymodule

import (
	"fmt"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Tuning holds prefix_load's measured constants. Their defaults were
// measured in the simulator and end to end (docs/experiments.md), and no
// deployment needs others, so the Caddyfile has no directive for them: the
// object exists so that experiments can vary them through JSON. Every
// field's zero value keeps the default.
type Tuning struct {
	// LoadSlack is the absolute slack, in requests, added to the load
	// bound so that a prefix group is not split while the replicas are
	// nearly idle. Default 2; -1: none (pure CHWBL).
	LoadSlack int `json:"load_slack,omitempty"`

	// ColdBalanceFactor is the balance factor of the looser bound a
	// returning prefix's home must be within. Default 3 (never below
	// balance_factor).
	ColdBalanceFactor float64 `json:"cold_balance_factor,omitempty"`

	// ColdSlack is how much more pending prefill than the least a replica
	// may have, as a fraction of a new prefix's prompt, to take the new
	// prefix. Default 0.5; -1: none.
	ColdSlack float64 `json:"cold_slack,omitempty"`

	// DetourSlack is how much more prefill, as a fraction of the request's
	// prompt, a request may wait behind at its prefix's replica than at
	// the cheapest candidate before it takes a detour. Default 1.5; -1: a
	// detour as soon as another replica is cheaper.
	DetourSlack float64 `json:"detour_slack,omitempty"`

	// UniqueRun is how many keyed requests in a row that find nothing seen
	// before make a router with peers place new prefixes by load (and,
	// with homes_directory, claim them off the request's path). Default
	// 64; -1: never.
	UniqueRun int `json:"unique_run,omitempty"`

	// Seed makes the strategies' random tie-breaks reproducible. Default
	// 0.
	Seed uint64 `json:"seed,omitempty"`
}

// options returns the strategy options t sets (none when t is nil).
func (t *Tuning) options() policies.Options {
	if t == nil {
		return policies.Options{}
	}
	return policies.Options{Seed: t.Seed, LoadSlack: t.LoadSlack, ColdBalanceFactor: t.ColdBalanceFactor,
		ColdSlack: t.ColdSlack, DetourSlack: t.DetourSlack, UniqueRun: t.UniqueRun}
}

// validate checks what the strategy's own check does not say in the
// JSON's terms.
func (t *Tuning) validate() error {
	if t != nil && t.ColdBalanceFactor != 0 && !(t.ColdBalanceFactor >= 1) {
		return fmt.Errorf("tuning.cold_balance_factor must be >= 1, got %v", t.ColdBalanceFactor)
	}
	return nil
}
