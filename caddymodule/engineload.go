package caddymodule

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/policies"
)

// engineLoad is the last scrape of one replica's metrics, as the router
// keeps it. Guarded by replicaState.mu.
type engineLoad struct {
	at         time.Time
	staleAfter time.Duration
	engine     string // vllm, sglang, llamacpp
	waiting    float64
	running    float64
	kvUsage    float64 // -1 when not reported
	numBlocks  int
	blockSize  int
	queries    float64 // prefix cache queries counter, -1 when absent
	hits       float64
	lastErr    string
	// asleep: the engine reported vLLM's sleep mode.
	asleep bool
	// adapters are the LoRA adapters it runs requests of now,
	// comma-separated (a string, so that the load compares).
	adapters string
	// ownInFlight is what this router had in flight on the replica when
	// the sample arrived: the figure the engine's counts are judged
	// against (policies.Replica.InFlightSinceSample).
	ownInFlight int
}

// status is the scrape as /llm_route/state shows it (nil before any).
func (e *engineLoad) status(now time.Time) *stateapi.Engine {
	if e.at.IsZero() && e.lastErr == "" {
		return nil
	}
	return &stateapi.Engine{
		Engine: e.engine, AgeSeconds: now.Sub(e.at).Seconds(), Stale: e.stale(now),
		Waiting: e.waiting, Running: e.running, KVUsage: e.kvUsage,
		NumBlocks: e.numBlocks, BlockSize: e.blockSize, LastError: e.lastErr,
		Queries: e.queries, Hits: e.hits,
	}
}

// adaptersRunning is set once any engine has reported LoRA adapters
// running (preferRunningAdapter); until then a pick does not look.
var adaptersRunning atomic.Bool

// reasonAsleep is the cooling reason of a replica whose engine reported
// vLLM's sleep mode.
const reasonAsleep = "asleep"

// sleeping returns how long a fresh sample that says the engine sleeps
// keeps the replica out (until the sample goes stale), or 0.
func (e *engineLoad) sleeping(now time.Time) time.Duration {
	if !e.asleep || e.stale(now) {
		return 0
	}
	return e.staleAfter - now.Sub(e.at)
}

// runs reports whether a fresh sample says the engine runs requests of
// adapter now.
func (e *engineLoad) runs(now time.Time, adapter string) bool {
	if e.adapters == "" || e.stale(now) {
		return false
	}
	for rest := e.adapters; rest != ""; {
		var a string
		a, rest, _ = strings.Cut(rest, ",")
		if a == adapter {
			return true
		}
	}
	return false
}

func (e *engineLoad) stale(now time.Time) bool {
	return e.at.IsZero() || now.Sub(e.at) > e.staleAfter
}

// view returns what the strategies see: queue, running and KV usage, each
// -1 when unknown or stale (never idle), and this router's in-flight count
// at the sample.
func (e *engineLoad) view(now time.Time) (waiting, running int, kv float64, own int) {
	if e.stale(now) {
		return -1, -1, -1, 0
	}
	return int(e.waiting), int(e.running), e.kvUsage, e.ownInFlight
}

// apply stores a sample taken at now and hands the engine's cache size and
// prefix-cache counter to the replica's belief, which sizes its index from
// the one and purges it when the other went backwards (a restart).
func (s *replicaState) apply(now time.Time, smp engineSample, staleAfter time.Duration) {
	s.mu.Lock()
	s.engine = engineLoad{
		at: now, staleAfter: staleAfter, engine: smp.engine, waiting: smp.waiting, running: smp.running,
		kvUsage: smp.kvUsage, numBlocks: smp.numBlocks, blockSize: smp.blockSize,
		queries: smp.queries, hits: smp.hits, ownInFlight: s.inFlight, asleep: smp.asleep, adapters: strings.Join(smp.adapters, ","),
	}
	if !smp.hasLoad && !smp.asleep {
		// Metrics without load figures tell us nothing: unknown, not idle.
		s.engine.at = time.Time{}
	}
	s.unlock()
	if len(smp.adapters) > 0 {
		adaptersRunning.Store(true)
	}
	if s.belief.Engine(policies.EngineCache{NumBlocks: smp.numBlocks, BlockTokens: smp.blockSize, PrefixQueries: smp.queries}) {
		metricIndexPurges.WithLabelValues(s.addr, policies.PurgeCountersReset).Inc()
	}
}

// scrapeFailed keeps the old values, which go stale on their own.
func (s *replicaState) scrapeFailed(msg string) {
	s.mu.Lock()
	s.engine.lastErr = msg
	s.unlock()
}
