package caddymodule

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The models a metric label may name: the exact names of llm_model
// matchers in the config and the models the replicas list on their own
// /v1/models. A client may send any model name, and an engine that serves
// every name it is sent would make a label per name; so any other model is
// labelled otherModel, and the set is capped.
//
// The replicas' lists are those the gateway read to answer a client's GET
// /v1/models (models.go), and, where a policy scrapes engine_metrics (so
// the gateway polls its replicas already), lists read in the background
// when a model nobody named arrives. Without engine_metrics the gateway
// sends its replicas nothing of its own accord.

// otherModel labels a model neither the config nor a replica names.
const otherModel = "other"

// maxModelLabels caps the models labelled by name.
const maxModelLabels = 256

// modelSet is the set of models labelled by name.
type modelSet struct {
	// known is the set in force, replaced whole (readers take no lock).
	known atomic.Pointer[map[string]struct{}]
	// reading is set while a read of the replicas' lists runs; nextRead
	// is when (Unix nanoseconds) an unknown model may start the next.
	reading  atomic.Bool
	nextRead atomic.Int64

	mu sync.Mutex
	// configured are the names the config gave (llm_model matchers).
	configured map[string]struct{}
	// listedNames are the names the replicas' lists have given.
	listedNames map[string]struct{}
}

// knownModels is the process's set: labels stay the same across reloads.
var knownModels = &modelSet{}

// label returns model if it is in the set, otherModel otherwise.
func (m *modelSet) label(model string) string {
	if k := m.known.Load(); k != nil {
		if _, ok := (*k)[model]; ok {
			return model
		}
	}
	return otherModel
}

// configure adds the exact names among patterns (those without `*`).
func (m *modelSet) configure(patterns []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.configured == nil {
		m.configured = map[string]struct{}{}
	}
	for _, p := range patterns {
		if p != "" && !strings.Contains(p, "*") {
			m.configured[p] = struct{}{}
		}
	}
	m.publishLocked()
}

// publishLocked puts in force the names in force, then the configured
// and the listed ones, at most maxModelLabels: a name once in force stays
// (its series does not change label), and configured ones come first.
func (m *modelSet) publishLocked() {
	k := map[string]struct{}{}
	if cur := m.known.Load(); cur != nil {
		maps.Copy(k, *cur)
	}
	for _, src := range []map[string]struct{}{m.configured, m.listedNames} {
		for n := range src {
			if len(k) >= maxModelLabels {
				break
			}
			k[n] = struct{}{}
		}
	}
	m.known.Store(&k)
}

// modelsRefreshEvery is how often an unknown model may make the set be
// read again from the replicas: as often as their lists are cached.
const modelsRefreshEvery = modelsTTL

// listed adds the models of lists the gateway read. Names stay once
// added (a label does not come and go with a replica's answers), within
// maxModelLabels.
func (m *modelSet) listed(models []modelEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.listedNames == nil {
		m.listedNames = map[string]struct{}{}
	}
	for _, e := range models {
		if e.ID != "" {
			m.listedNames[e.ID] = struct{}{}
		}
	}
	m.publishLocked()
}

// noteModel makes sure that the request's model, if a replica lists it,
// is soon in the set: where a live policy scrapes engine metrics, an
// unknown model starts a read of the replicas' lists in the background,
// at most one at a time and one per modelsRefreshEvery. It is called as a
// request arrives, so that the request's own label, read as it ends,
// already knows the model when a replica lists it. Requests of unknown
// models between reads take no lock (one compare-and-swap wins each
// period).
func (h *LLMRoute) noteModel(rc *routeCtx) {
	if rc.req == nil || rc.req.Model == "" || knownModels.label(rc.req.Model) != otherModel {
		return
	}
	m := knownModels
	next, now := m.nextRead.Load(), time.Now().UnixNano()
	if now < next || !m.nextRead.CompareAndSwap(next, now+int64(modelsRefreshEvery)) || !scrapesEngines() {
		return
	}
	if !m.reading.CompareAndSwap(false, true) {
		return
	}
	go h.refreshModels(m)
}

// refreshModels adds every routable replica's list (models.go) to m.
func (h *LLMRoute) refreshModels(m *modelSet) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*modelsFetchTimeout)
	defer cancel()
	var listed []modelEntry
	for _, t := range routableReplicas() {
		models, _ := h.replicaModels(ctx, t)
		listed = append(listed, models...)
	}
	m.listed(listed)
	m.reading.Store(false)
}

// scrapesEngines reports whether a live policy scrapes its replicas'
// engine metrics.
func scrapesEngines() bool {
	livePolicies.Lock()
	defer livePolicies.Unlock()
	for _, p := range livePolicies.list {
		if p.EngineMetrics != nil {
			return true
		}
	}
	return false
}
