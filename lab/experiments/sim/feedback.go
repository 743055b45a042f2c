package sim

import "github.com/llmroute/caddy-llmroute/simengine"

// feedback is the module's feedbackState (caddymodule/feedback.go): it
// checks each prediction against the cached tokens the engine reported and
// resizes or purges the replica's index.
type feedback struct {
	missRun int
}

// The module's constants.
const (
	purgeMissRun   = 3
	purgeMinBlocks = 4
	minIndexBlocks = 64
)

// observe mirrors replicaState.observe: hit when the index predicted a
// prefix and the engine had some of it, miss when it predicted one and the
// engine had none (concurrent, and left alone, when another request of
// that prefix was still before its first token there), cold when it
// predicted nothing. A miss shrinks the
// index by 1/8 (floor 64), a hit grows it by capacity/64 up to the maximum
// (the engine-derived one when metrics are sampled, else the configured
// index_blocks), and purgeMissRun misses in a row on predictions of at
// least purgeMinBlocks blocks purge it.
func (s *Sim) observe(rt *router, i int, f *flight, u simengine.Usage) {
	v := &rt.reps[i]
	res := &s.res.Residency
	maxCap := s.indexMax
	if v.maxIndex > 0 {
		maxCap = v.maxIndex
	}
	switch {
	case f.predicted > 0 && u.CachedTokens > 0:
		v.fb.missRun = 0
		if c := v.index.Capacity(); c < maxCap {
			v.index.SetCapacity(min(c+max(c/64, 1), maxCap))
		}
	case f.predicted > 0 && f.concurrent:
		// The engine was still computing it: neither hit nor miss.
	case f.predicted > 0:
		if f.predicted >= purgeMinBlocks {
			v.fb.missRun++
			if v.fb.missRun >= purgeMissRun {
				s.purge(v, &res.PurgesMisses)
				return
			}
		}
		v.index.SetCapacity(max(v.index.Capacity()*7/8, minIndexBlocks))
	}
}
