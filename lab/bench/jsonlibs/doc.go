// Package jsonlibs holds the comparison of llmroute's request parse with
// the JSON libraries it could have used instead, on the bench's agent
// bodies: why the parse is hand-written (lab/bench/README.md, "The parse
// against JSON libraries"). It has no code of its own; see its tests.
package jsonlibs
