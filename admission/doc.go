// Package admission holds llmroute's admission rules in pure Go: who goes
// next when every replica is full, who may take the pool's last capacity,
// and how much a tenant may spend per minute. It imports nothing of Caddy
// or net/http, so that the Caddy module (caddymodule/waitqueue.go,
// budgets.go) and the admission simulator of the lab
// run the same decisions:
//
//   - Priority: the three bands (critical, standard, sheddable), and the
//     rule that a request may lower its own band, never raise it
//     (Priority.Lower).
//   - Queue: the wait queue. Strict priority bands; within a band, fair
//     across flows (tenants) by weight with virtual token counters; FIFO
//     within a flow; an optional in-flight cap per flow; the newest
//     sheddable waiter as the victim when a full queue must make room.
//   - SheddableAllowed: sheddable traffic is admitted only below a share
//     of the pool's caps, so it never takes the last capacity.
//   - Bucket and Estimate: per-minute request and token budgets as token
//     buckets, reserved at admission from an estimate (the prompt at
//     policies.BytesPerToken, plus the tenant's recent output) and settled
//     from the engine's reported usage.
//
// Nothing here reads a clock: callers pass the time.
package admission
