package workload

import "math/rand/v2"

// Workloads from outside the generator (a replayed trace) are built from
// sessions their reader makes, with texts from the generator's vocabulary.

// Trace is the kind of a workload replayed from a request trace.
const Trace = "trace"

// TextSource makes pseudo-English texts of exact token counts from one
// vocabulary, as Generate does: the same source and the same rng state
// give the same text.
type TextSource struct{ v vocabulary }

// NewTextSource returns the text source of a vocabulary seed.
func NewTextSource(seed uint64) *TextSource { return &TextSource{v: newVocabulary(seed)} }

// Text returns a text of exactly tokens tokens (at least 1) drawn with rng.
func (s *TextSource) Text(rng *rand.Rand, tokens int) string { return s.v.text(rng, tokens) }

// FromSessions returns the workload of the given sessions, in arrival
// order, with p describing it (p.Rate is the sessions' mean arrival rate,
// which ScaleRate changes).
func FromSessions(p Params, sessions []Session) *Workload {
	if p.Model == "" {
		p.Model = DefaultModel
	}
	if p.HashBytes == 0 {
		p.HashBytes = 256
	}
	w := &Workload{Params: p}
	for _, s := range sessions {
		w.add(s)
	}
	w.describe()
	return w
}
