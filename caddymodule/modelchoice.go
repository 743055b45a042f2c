package caddymodule

import (
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmroute/caddy-llmroute/policies"
)

// Model-aware choice within a pool. Replicas of one pool may serve
// different models: vLLM loads LoRA adapters per replica at run time, and
// lists each under its own id (with parent set to its base model). A
// replica whose own /v1/models list is known and does not name the
// requested model would answer 404, so it is left out of the pick while a
// replica that lists it is in the view; replicas whose list is unknown
// stay in. When no replica lists the model, the request goes as it would
// without lists: the engine may load it on demand. The lists are those the
// gateway already keeps for GET /v1/models (models.go); the pick reads
// them and never fetches.

// listsModel reports whether the replica at addr is known to list model
// (known: its list was fetched and is not older than maxAge).
func listsModel(addr, model string, now time.Time, maxAge time.Duration) (lists, known bool) {
	v, ok := modelCache.Load(addr)
	if !ok {
		return false, false
	}
	rm := v.(*replicaModels)
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if !rm.ok || rm.at.IsZero() || now.Sub(rm.at) > maxAge {
		return false, false
	}
	for i := range rm.models {
		e := &rm.models[i]
		// An adapter's base model runs wherever the adapter does.
		if e.ID == model || (e.Parent != nil && *e.Parent == model) {
			return true, true
		}
	}
	return false, true
}

// listsDiffer is set while the replicas' known lists are not all alike:
// only then can the filter leave a replica out, so a pool whose replicas
// serve the same models pays one atomic load a pick for it.
var listsDiffer atomic.Bool

// recheckLists recomputes listsDiffer; it runs when a list is fetched.
func recheckLists() {
	first, differ, seen := "", false, false
	modelCache.Range(func(_, v any) bool {
		rm := v.(*replicaModels)
		rm.mu.Lock()
		ok := rm.ok
		ids := make([]string, 0, len(rm.models))
		for _, e := range rm.models {
			ids = append(ids, e.ID)
		}
		rm.mu.Unlock()
		if !ok {
			return true
		}
		slices.Sort(ids)
		key := strings.Join(ids, "\n")
		switch {
		case !seen:
			first, seen = key, true
		case key != first:
			differ = true
			return false
		}
		return true
	})
	listsDiffer.Store(differ)
}

// modelListAge is how old a replica's list may be for the pick to trust
// it: a few refreshes, so that an adapter unloaded a moment ago does not
// keep its replica chosen for long, and one loaded a moment ago is found.
const modelListAge = 3 * modelsTTL

// preferRunningAdapter: among the available replicas, those whose engine
// runs requests of the adapter model now (vLLM's lora_requests_info)
// have its weights loaded in a LoRA slot, where another would first load
// them (and may evict one it runs): while one of them is Free, the others
// are left out of this pick, as llm-d's LoRA-affinity scorer prefers
// them. runs reports it for view[i]. It reports how many it left out.
func preferRunningAdapter(view []policies.Replica, model string, runs func(i int) bool) int {
	if model == "" {
		return 0
	}
	var buf [64]bool
	running := buf[:0]
	if len(view) > len(buf) {
		running = make([]bool, 0, len(view))
	}
	free := false
	for i := range view {
		r := !view[i].Unavailable && runs(i)
		running = append(running, r)
		free = free || (r && view[i].Free())
	}
	if !free {
		return 0
	}
	out := 0
	for i, r := range running {
		if !r && !view[i].Unavailable {
			view[i].Unavailable = true
			out++
		}
	}
	return out
}

// leaveOutOtherModels marks Unavailable, for this pick, the replicas of
// view whose known list does not name model, when at least one available
// replica's list does. It reports how many it left out.
func leaveOutOtherModels(view []policies.Replica, model string, now time.Time) int {
	if model == "" || !listsDiffer.Load() {
		return 0
	}
	serving, out := false, 0
	var buf [64]int8 // per replica: 1 lists it, -1 known without it, 0 unknown
	marks := buf[:0]
	if len(view) > len(buf) {
		marks = make([]int8, 0, len(view))
	}
	for i := range view {
		var m int8
		if !view[i].Unavailable {
			switch lists, known := listsModel(view[i].Addr, model, now, modelListAge); {
			case lists:
				m, serving = 1, true
			case known:
				m = -1
			}
		}
		marks = append(marks, m)
	}
	if !serving {
		return 0
	}
	for i, m := range marks {
		if m < 0 {
			view[i].Unavailable = true
			out++
		}
	}
	return out
}
