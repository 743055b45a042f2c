// Package policies holds llmroute's routing decisions in pure Go: request
// parsing, prefix keys, the approximate residency index and the strategies.
// It imports nothing from Caddy or net/http so that the Caddy module, the
// simulated replica and the experiment harness all run the same decisions.
//
// A request flows through it in three steps:
//
//  1. Parse reads the body once and returns a Request with its Keys: a
//     leading key (deployment, model, cache_salt, tools and the leading
//     system/developer messages) and a chain of block hashes over the whole
//     prompt.
//  2. The caller describes every replica as a Replica (in-flight count, cap,
//     cooling, engine load when known, and its residency Index).
//  3. A Strategy picks one replica index, or -1 when none can take it.
package policies
