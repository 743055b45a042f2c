package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp/reverseproxy"
	"go.uber.org/zap"
	"golang.org/x/sync/singleflight"
)

// GET /v1/models, answered by the gateway: the models it can route, in
// OpenAI's list format, from the replicas' own /v1/models. The replicas are
// those of every reverse_proxy that uses `lb_policy llm` in the running
// config (its static upstreams, read from the config as it runs) and every
// replica such a policy has routed to (dynamic upstreams), so that the
// list follows replicas as they come and go. Each replica's list is cached
// for modelsTTL and fetched again after (replicaModels).

// modelsTTL is how long one replica's model list is reused.
const modelsTTL = 10 * time.Second

// modelsStaleTTL is how long a replica's last good list still answers
// while fetching it again fails: a failure is never cached, and never
// stands for an empty list.
const modelsStaleTTL = time.Minute

// modelsFetchTimeout bounds one replica's answer.
const modelsFetchTimeout = 2 * time.Second

// maxModelsBytes bounds one replica's /v1/models body. A longer answer
// is a failure (logged), not a truncated list.
const maxModelsBytes = 16 << 20

// modelEntry is one model in OpenAI's list format.
type modelEntry struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// Root and Parent are vLLM's: a LoRA adapter is listed under its own
	// id with Parent naming the base model it runs on.
	Root   string  `json:"root,omitempty"`
	Parent *string `json:"parent,omitempty"`
}

// modelList is the body of GET /v1/models.
type modelList struct {
	Object string       `json:"object"`
	Data   []modelEntry `json:"data"`
}

// replicaModels is one replica's cached list.
type replicaModels struct {
	mu     sync.Mutex
	at     time.Time
	models []modelEntry
	ok     bool
}

// modelCache holds the replicas' lists, by dial address.
var modelCache sync.Map // string -> *replicaModels

// serveModels answers GET /v1/models from the replicas' own lists.
func (h *LLMRoute) serveModels(w http.ResponseWriter, r *http.Request) {
	targets := routableReplicas()
	lists := make([][]modelEntry, len(targets))
	oks := make([]bool, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lists[i], oks[i] = h.replicaModels(r.Context(), t)
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	out := modelList{Object: "list", Data: []modelEntry{}}
	anyOK := false
	for i, l := range lists {
		anyOK = anyOK || oks[i]
		for _, m := range l {
			if m.ID != "" && !seen[m.ID] {
				seen[m.ID] = true
				out.Data = append(out.Data, m)
			}
		}
	}
	if len(targets) > 0 && !anyOK {
		writeAPIError(w, rejectError(rejectNoHealthy, time.Second))
		return
	}
	sort.Slice(out.Data, func(i, j int) bool { return out.Data[i].ID < out.Data[j].ID })
	knownModels.listed(out.Data) // the metrics' model labels (modellabels.go)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// modelsTarget is one replica to ask: its dial address and scheme.
type modelsTarget struct{ addr, scheme string }

// modelFetches collapses concurrent fetches of one replica's list into
// one.
var modelFetches singleflight.Group

// replicaModels returns t's list, from the cache while fresh. A fetch
// runs on a context of its own, bounded by modelsFetchTimeout, and is
// shared by every request that asks meanwhile: a client that leaves
// stops waiting for it, not the fetch, so its leaving cannot fail the
// list for the others. Only a good list is cached; while fetching fails,
// the last good one answers for up to modelsStaleTTL.
func (h *LLMRoute) replicaModels(ctx context.Context, t modelsTarget) ([]modelEntry, bool) {
	v, _ := modelCache.LoadOrStore(t.addr, &replicaModels{})
	rm := v.(*replicaModels)
	rm.mu.Lock()
	if rm.ok && time.Since(rm.at) < modelsTTL {
		models := rm.models
		rm.mu.Unlock()
		return models, true
	}
	rm.mu.Unlock()
	ch := modelFetches.DoChan(t.scheme+"://"+t.addr, func() (any, error) {
		fctx, cancel := context.WithTimeout(context.Background(), modelsFetchTimeout)
		defer cancel()
		models, err := h.fetchModels(fctx, t)
		go recheckLists() // modelchoice.go; it takes rm's lock, once this returns
		rm.mu.Lock()
		defer rm.mu.Unlock()
		switch {
		case err == nil:
			rm.at, rm.models, rm.ok = time.Now(), models, true
			return models, nil
		case rm.ok && time.Since(rm.at) < modelsStaleTTL:
			return rm.models, nil
		}
		if h.logger != nil {
			h.logger.Debug("replica model list", zap.String("replica", t.addr), zap.Error(err))
		}
		return nil, err
	})
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, false
		}
		return res.Val.([]modelEntry), true
	case <-ctx.Done():
		return nil, false
	}
}

// errModelsTooLarge is a replica's list over maxModelsBytes.
var errModelsTooLarge = errors.New("llmroute: model list over 16 MiB")

// fetchModels asks one replica for its /v1/models.
func (h *LLMRoute) fetchModels(ctx context.Context, t modelsTarget) ([]modelEntry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.scheme+"://"+t.addr+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	if h.upstream != "" {
		req.Header.Set("Authorization", "Bearer "+h.upstream)
	}
	resp, err := modelsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("llmroute: model list answered %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxModelsBytes+1))
	switch {
	case err != nil:
		return nil, err
	case len(b) > maxModelsBytes:
		if h.logger != nil {
			h.logger.Warn("replica model list too large", zap.String("replica", t.addr), zap.Int("limit_bytes", maxModelsBytes))
		}
		return nil, errModelsTooLarge
	}
	var l modelList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	for i := range l.Data {
		if l.Data[i].Object == "" {
			l.Data[i].Object = "model"
		}
	}
	if l.Data == nil {
		l.Data = []modelEntry{}
	}
	return l.Data, nil
}

// modelsClient asks replicas for their lists.
var modelsClient = &http.Client{Timeout: modelsFetchTimeout}

// routableReplicas returns the replicas of every llm policy in the running
// config: the static upstreams of each reverse_proxy using it and the
// replicas each live policy has routed to.
func routableReplicas() []modelsTarget {
	seen := map[string]bool{}
	var out []modelsTarget
	add := func(addr, scheme string) {
		if addr != "" && !seen[addr] {
			seen[addr] = true
			out = append(out, modelsTarget{addr: addr, scheme: scheme})
		}
	}
	if app, err := caddy.ActiveContext().AppIfConfigured("http"); err == nil {
		if ha, ok := app.(*caddyhttp.App); ok {
			for _, srv := range ha.Servers {
				walkProxies(srv.Routes, func(h *reverseproxy.Handler) {
					scheme := "http"
					if tr, ok := h.Transport.(*reverseproxy.HTTPTransport); ok && tr.TLSEnabled() {
						scheme = "https"
					}
					for _, u := range h.Upstreams {
						add(u.String(), scheme)
					}
				})
			}
		}
	}
	livePolicies.Lock()
	for _, p := range livePolicies.list {
		p.states.Range(func(k, _ any) bool {
			add(k.(string), "http")
			return true
		})
	}
	livePolicies.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// walkProxies calls f for every reverse_proxy handler using lb_policy llm
// in routes, subroutes included.
func walkProxies(routes caddyhttp.RouteList, f func(*reverseproxy.Handler)) {
	for _, rt := range routes {
		for _, mh := range rt.Handlers {
			switch h := mh.(type) {
			case *reverseproxy.Handler:
				if h.LoadBalancing != nil {
					if _, ok := h.LoadBalancing.SelectionPolicy.(*LLMSelection); ok {
						f(h)
					}
				}
			case *caddyhttp.Subroute:
				walkProxies(h.Routes, f)
			}
		}
	}
}
