// Package simengine is a pure, deterministic model of an LLM inference engine
// in the style of vLLM: a tokenizer, a paged KV cache with automatic prefix
// caching, and a continuous-batching scheduler with chunked prefill and
// recompute preemption.
//
// The engine has no goroutines, no locks and no clock. Time only appears as
// the modelled duration that Step returns, so the same engine can be driven
// by a wall-clock loop (the simreplica HTTP server sleeps that long between
// steps) or by a discrete-event simulator (which advances its virtual clock
// by that much). An Engine is not safe for concurrent use; callers that
// share one between goroutines must serialise access themselves.
//
// A typical driving loop:
//
//	e, _ := simengine.New(simengine.DefaultConfig())
//	_ = e.Submit(simengine.Request{ID: 1, Prompt: simengine.Tokenize(text), MaxTokens: 64})
//	var now time.Duration
//	for !e.Idle() {
//		dt, events := e.Step()
//		now += dt // every event of this step happens at now
//		for _, ev := range events { ... }
//	}
//
// See docs/engine-model.md for the model, its defaults and their sources.
package simengine
