// Package client drives llmroute's real-engine measurement: it builds the
// workloads, streams them through the router, and summarises what the
// client saw, what the engines reported and what the router predicted.
package client

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Workload names.
const (
	SharedPrefix   = "shared_prefix"
	NoSharedPrefix = "no_shared_prefix"
)

// WorkloadConfig sizes a workload.
type WorkloadConfig struct {
	Name        string  // SharedPrefix or NoSharedPrefix
	Groups      int     // system prompts shared by a group of requests
	PerGroup    int     // requests per group
	SystemChars int     // length of each system prompt (≈ tokens with the byte vocabulary)
	Rate        float64 // Poisson arrival rate, requests per second
	MaxTokens   int
	Seed        uint64
}

// Request is one planned request.
type Request struct {
	Index  int           `json:"index"`
	Group  int           `json:"group"` // shared system prompt id; -1 for a unique one
	At     time.Duration `json:"at"`    // send time from the start of the run
	System string        `json:"-"`
	User   string        `json:"-"`
}

var words = strings.Fields(`the of and to in is was for on that with as by at from this be are or an
it which not have has had were but all can one their more also been other there its some when what
into two new time only may these first would any such than then them most after over between about
used many where under both while during each through three same those because before being system
model cache prefix token block replica router engine request stream latency queue memory layer value
policy server client answer question context window batch tensor vector weight graph table index
record field event signal metric sample budget number string buffer packet socket thread process`)

// Plan builds a workload's requests: in shared_prefix, Groups system
// prompts each used by PerGroup requests with different questions, in a
// shuffled order; in no_shared_prefix, every request has its own system
// prompt of the same length. Arrivals are Poisson at Rate. The same config
// gives the same plan, so every policy sees identical traffic.
func Plan(c WorkloadConfig) ([]Request, error) {
	if c.Groups <= 0 || c.PerGroup <= 0 || c.SystemChars <= 0 || c.Rate <= 0 {
		return nil, fmt.Errorf("bench: groups, per-group, system size and rate must be positive")
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x51ed270b27a4c0f3))
	n := c.Groups * c.PerGroup
	prompts := c.Groups
	if c.Name == NoSharedPrefix {
		prompts = n
	} else if c.Name != SharedPrefix {
		return nil, fmt.Errorf("bench: unknown workload %q", c.Name)
	}
	// Every system prompt starts with its own 4-letter tag, so that no two
	// share more than the template's first few tokens.
	seen := map[string]bool{}
	systems := make([]string, prompts)
	for i := range systems {
		var tag string
		for tag == "" || seen[tag] {
			b := make([]byte, 4)
			for j := range b {
				b[j] = byte('A' + rng.IntN(26))
			}
			tag = string(b)
		}
		seen[tag] = true
		systems[i] = text(rng, tag+" assistant. ", c.SystemChars)
	}
	reqs := make([]Request, n)
	for i := range reqs {
		g := i % c.Groups
		sys := systems[g]
		if c.Name == NoSharedPrefix {
			g, sys = -1, systems[i]
		}
		reqs[i] = Request{Group: g, System: sys,
			User: text(rng, fmt.Sprintf("Question %d: ", i), 40+rng.IntN(40)) + "?"}
	}
	rng.Shuffle(n, func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	var t float64
	for i := range reqs {
		reqs[i].Index = i
		if i > 0 {
			t += rng.ExpFloat64() / c.Rate
		}
		reqs[i].At = time.Duration(t * float64(time.Second))
	}
	return reqs, nil
}

// text returns prefix followed by random words, size characters long.
func text(rng *rand.Rand, prefix string, size int) string {
	var b strings.Builder
	b.WriteString(prefix)
	for b.Len() < size {
		b.WriteString(words[rng.IntN(len(words))])
		if rng.IntN(12) == 0 {
			b.WriteString(". ")
		} else {
			b.WriteByte(' ')
		}
	}
	return strings.TrimSpace(b.String()[:size])
}
