// Package simreplica is a simulated OpenAI-compatible LLM replica: an HTTP
// server over an engine.Engine that a driver goroutine runs in real time.
// It answers like vLLM's OpenAI server where llmroute can tell (streaming
// format, usage with cached_tokens, Prometheus metric names, errors), and
// lets tests inject faults per request (X-Sim-Fault header) or globally
// (flag, SetFault, POST /sim/fault). Every API renders its conversation
// with one chat template, so one conversation shares the cache whichever
// API carries it.
//
// Endpoints:
//
//	POST /v1/chat/completions   chat (stream or not)
//	POST /v1/completions        completions (stream or not)
//	POST /v1/messages           Anthropic Messages (JSON, or SSE from
//	                            message_start to message_stop), usage with
//	                            cache_read_input_tokens; Anthropic errors
//	POST /v1/messages/count_tokens  {"input_tokens": n}
//	POST /v1/responses          OpenAI Responses (JSON or SSE), resp_ ids;
//	                            previous_response_id and conversation
//	                            continue state kept on this replica
//	                            (bounded; an unknown id gets 404
//	                            previous_response_not_found)
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
