package caddymodule

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/policies"
)

// lockedView is what snapshot read before the live view: every field under
// the replica's lock. TestLiveViewMatchesLocked holds snapshot to it.
func lockedView(s *replicaState, now time.Time, limit int, slowStart time.Duration) replicaView {
	s.mu.Lock()
	defer s.mu.Unlock()
	limit = slowStartLimitAt(now, s.firstSeen, limit, slowStart)
	v := replicaView{limit: limit, inFlight: s.inFlight, prefilling: s.prefilling, avail: s.availableLocked(now, limit)}
	if now.Before(s.coolUntil) {
		v.coolLeft = s.coolUntil.Sub(now)
		v.coolReason, v.failedAt = s.coolReason, s.failedAt
	}
	v.waiting, v.running, v.kv, v.sampledInFlight = s.engine.view(now)
	v.pending = s.pendingPrefillLocked()
	return v
}

// TestLiveViewMatchesLocked proves that the lock-free snapshot a selection
// reads equals the replica's fields read under its lock, after every step
// of random traffic on one replica: reservations, placements with pending
// prefill, first bytes, probe answers, successes and failures that cool
// it, cooldowns ended early, departures and rejoins (slow start), engine
// scrapes and time passing. The counts show every availability was met.
func TestLiveViewMatchesLocked(t *testing.T) {
	clk := clockwork.NewFakeClock()
	st := newReplicaState("test-live-view", clk)
	t.Cleanup(func() { _ = st.Destruct() })
	rules := &attemptRules{cd: cooldownConfig{base: 300 * time.Millisecond, max: 2 * time.Second, statusFails: 1}}
	r := rand.New(rand.NewPCG(7, 8))
	keys := make([]policies.Keys, 8)
	for i := range keys {
		body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"prompt %d %0300d"}]}`, i, i)
		req, err := policies.Parse("/v1/chat/completions", []byte(body), policies.ParseConfig{})
		require.NoError(t, err)
		keys[i] = req.Keys
	}
	var live []*attempt
	seen := map[availability]int{}
	pendingSeen := 0
	for step := range 6000 {
		now := clk.Now()
		switch k := r.IntN(100); {
		case k < 30:
			if a, ok := st.reserve(now, 4, rules); ok {
				if r.IntN(4) > 0 {
					a.placeKeys(keys[r.IntN(len(keys))], "")
				}
				live = append(live, a)
			}
		case k < 45 && len(live) > 0:
			live[r.IntN(len(live))].firstByte()
		case k < 52 && len(live) > 0:
			live[r.IntN(len(live))].answered(200)
		case k < 72 && len(live) > 0:
			i := r.IntN(len(live))
			o := outcome{kind: outcomeSuccess}
			if r.IntN(4) == 0 {
				o = failed(reasonStatus, 0)
				o.status, o.reqID = 500, uint64(step+1)
			}
			live[i].end(o)
			live = append(live[:i], live[i+1:]...)
		case k < 75:
			st.endStatusCooldown(now)
		case k < 77:
			st.depart()
			st.rejoin(now)
		case k < 82:
			st.apply(now, engineSample{engine: "vllm", waiting: float64(r.IntN(5)), running: float64(r.IntN(5)),
				kvUsage: r.Float64(), hasLoad: r.IntN(5) > 0}, time.Second)
		default:
			clk.Advance(time.Duration(r.IntN(200)) * time.Millisecond)
		}
		now = clk.Now()
		for _, limit := range []int{0, 2, 4} {
			want := lockedView(st, now, limit, time.Second)
			got := st.snapshot(now, limit, time.Second)
			if got != want {
				t.Fatalf("step %d, limit %d: snapshot %+v, under the lock %+v", step, limit, got, want)
			}
			if limit == 4 {
				seen[got.avail]++
				if got.pending > 0 {
					pendingSeen++
				}
			}
		}
	}
	for _, a := range live {
		a.end(outcome{kind: outcomeSuccess})
	}
	require.Equal(t, 0, st.inFlightNow())
	t.Logf("availability seen: ok %d, full %d, cooling %d, probing %d; pending prefill > 0: %d",
		seen[availOK], seen[availFull], seen[availCooling], seen[availProbing], pendingSeen)
	for _, av := range []availability{availOK, availFull, availCooling, availProbing} {
		require.Greater(t, seen[av], 50, "availability %d seen too rarely", av)
	}
	require.Greater(t, pendingSeen, 200)
}
