// Package simreplica is a simulated OpenAI-compatible LLM replica: an HTTP
// server over an engine.Engine that a driver goroutine runs in real time.
// It answers like vLLM's OpenAI server where llmroute can tell (streaming
// format, usage with cached_tokens, Prometheus metric names, errors), and
// lets tests inject faults per request (X-Sim-Fault header) or globally
// (flag, SetFault, POST /sim/fault).
//
// Endpoints:
//
//	POST /v1/chat/completions   chat (stream or not)
//	POST /v1/completions        completions (stream or not)
//	GET  /v1/models             the configured model
//	GET  /health                200 "ok"; 503 during a restart's down time
//	GET  /metrics               Prometheus text, vLLM metric names
//	GET  /sim/stats             request counters and engine state (JSON)
//	POST /sim/stats/reset       zero the request counters
//	POST /sim/restart           crash-restart: abort requests, wipe cache
//	GET|POST /sim/fault         read or set the global fault
//	POST /sim/cached            cached prefix tokens of a body (oracle)
//
// See docs/engine-model.md for the engine model and the fault headers.
package simreplica
