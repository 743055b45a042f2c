package admission

import "strings"

// Priority is a request's admission band. Bands are strict: a waiting
// request of a higher band is always admitted before any of a lower one.
type Priority int8

// The bands, lowest first.
const (
	// Sheddable traffic (batch jobs, evaluations, prefetch) is admitted only
	// while the pool is below its sheddable share (SheddableAllowed), and
	// is the first to be displaced from a full queue.
	Sheddable Priority = iota
	// Standard is the default band.
	Standard
	// Critical traffic (interactive, paying) goes before everything else.
	Critical
)

// NumPriorities is the number of bands.
const NumPriorities = 3

// ParsePriority reads a band's name (critical, standard or sheddable, in
// any case, surrounding spaces ignored). It reports false for anything
// else.
func ParsePriority(s string) (Priority, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "critical":
		return Critical, true
	case "standard":
		return Standard, true
	case "sheddable":
		return Sheddable, true
	}
	return Standard, false
}

// String returns the band's name.
func (p Priority) String() string {
	switch p {
	case Critical:
		return "critical"
	case Sheddable:
		return "sheddable"
	}
	return "standard"
}

// Lower returns the band a request asking for req gets under the ceiling
// p: req when it is not above p, else p. A client may lower its own
// priority (a tenant's batch job marks itself sheddable), never raise it
// above what its tenant was given.
func (p Priority) Lower(req Priority) Priority {
	if req < p {
		return req
	}
	return p
}
