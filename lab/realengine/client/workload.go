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
	// MultiTurn is conversations whose every turn repeats the earlier
	// turns, the engine's answers included, before a new question.
	MultiTurn = "multi_turn"
)

// WorkloadConfig sizes a workload.
type WorkloadConfig struct {
	Name        string  // SharedPrefix, NoSharedPrefix or MultiTurn
	Groups      int     // system prompts shared by a group of requests (MultiTurn: conversations)
	PerGroup    int     // requests per group (MultiTurn: turns per conversation)
	SystemChars int     // length of each system prompt (≈ tokens with the byte vocabulary)
	Rate        float64 // Poisson arrival rate, requests per second
	MaxTokens   int
	Seed        uint64
}

// Request is one planned request.
type Request struct {
	Index int           `json:"index"`
	Group int           `json:"group"` // shared system prompt id (MultiTurn: conversation); -1 for a unique one
	At    time.Duration `json:"at"`    // send time from the start of the run
	// Turn is the request's turn in its conversation (0 outside
	// MultiTurn), and Prev the plan index of the turn before it (-1 for
	// none): it is sent only after Prev has ended, with Prev's history,
	// question and answer as its History.
	Turn   int    `json:"turn"`
	Prev   int    `json:"prev"`
	System string `json:"-"`
	User   string `json:"-"`
	// MaxTokens is the answer length (0: the client's).
	MaxTokens int `json:"max_tokens,omitempty"`
	// History is the conversation so far, filled in when the request is
	// sent (the answers are the engine's).
	History []Exchange `json:"-"`
}

// Exchange is one earlier turn of a conversation: the question and the
// answer the engine streamed.
type Exchange struct {
	User, Assistant string
}

// Messages returns the request's chat messages: the system prompt (none
// when empty), the earlier exchanges, the question.
func (r Request) Messages() []Message {
	var ms []Message
	if r.System != "" {
		ms = append(ms, Message{Role: "system", Content: r.System})
	}
	for _, h := range r.History {
		ms = append(ms, Message{Role: "user", Content: h.User}, Message{Role: "assistant", Content: h.Assistant})
	}
	return append(ms, Message{Role: "user", Content: r.User})
}

// Message is one chat message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
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
// prompt of the same length; in multi_turn, Groups conversations of
// PerGroup turns, each with its own system prompt, their turns interleaved
// at random but in order within a conversation (a turn's History is
// filled when it is sent). Arrivals are Poisson at Rate. The same config
// gives the same plan, so every policy sees identical traffic.
func Plan(c WorkloadConfig) ([]Request, error) {
	if c.Groups <= 0 || c.PerGroup <= 0 || c.SystemChars <= 0 || c.Rate <= 0 {
		return nil, fmt.Errorf("bench: groups, per-group, system size and rate must be positive")
	}
	rng := rand.New(rand.NewPCG(c.Seed, 0x51ed270b27a4c0f3))
	n := c.Groups * c.PerGroup
	prompts := c.Groups
	switch c.Name {
	case NoSharedPrefix:
		prompts = n
	case SharedPrefix, MultiTurn:
	default:
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
		reqs[i] = Request{Group: g, System: sys, Prev: -1,
			User: text(rng, fmt.Sprintf("Question %d: ", i), 40+rng.IntN(40)) + "?"}
	}
	rng.Shuffle(n, func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	if c.Name == MultiTurn {
		// A conversation's turns keep their shuffled positions but are
		// numbered in order of appearance, each after the one before.
		last := map[int]int{}
		for i := range reqs {
			g := reqs[i].Group
			if p, ok := last[g]; ok {
				reqs[i].Prev, reqs[i].Turn = p, reqs[p].Turn+1
			}
			last[g] = i
		}
	}
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
