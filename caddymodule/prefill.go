package caddymodule

import "sync"

// Pending prefill: per replica, the prompt bytes this router sent that the
// replica's belief did not hold (policies.UncachedBytes) and whose first
// byte has not come back yet. It is the prefill queued ahead of a new
// request there, which sets that request's time to first token; prefix_load
// places a new prefix where it is least (policies.Replica.PendingPrefill).
//
// An attempt's entry lives from placeKeys to the end of its prefilling
// phase (attempt.firstByte or attempt.end, whichever comes first), which
// this ledger reads from the attempt itself rather than being told: the
// sum is taken at each decision, over the entries still prefilling, and
// drops the others as it goes.

// prefillEntry is one attempt's contribution.
type prefillEntry struct {
	a     *attempt
	bytes int
}

// prefillList is one replica's entries.
type prefillList struct {
	mu      sync.Mutex
	entries []prefillEntry
}

// prefillLedgers maps a *replicaState to its *prefillList. A replica state
// that leaves keeps a list of entries whose attempts have ended: a few
// bytes, until the process ends.
var prefillLedgers sync.Map

func prefillOf(s *replicaState) *prefillList {
	if l, ok := prefillLedgers.Load(s); ok {
		return l.(*prefillList)
	}
	l, _ := prefillLedgers.LoadOrStore(s, &prefillList{})
	return l.(*prefillList)
}

// addPending counts bytes of prefill for a, which must still be prefilling
// (its caller holds no lock).
func addPending(a *attempt, bytes int) {
	if bytes <= 0 {
		return
	}
	l := prefillOf(a.rep)
	l.mu.Lock()
	l.entries = append(l.entries, prefillEntry{a: a, bytes: bytes})
	l.mu.Unlock()
}

// pendingPrefill is the replica's pending prefill now, in bytes.
func pendingPrefill(s *replicaState) int {
	v, ok := prefillLedgers.Load(s)
	if !ok {
		return 0
	}
	l := v.(*prefillList)
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.entries) == 0 {
		return 0
	}
	sum := 0
	kept := l.entries[:0]
	s.mu.Lock() // guards the attempts' prefilling and released flags
	for _, e := range l.entries {
		if e.a.prefilling && !e.a.released {
			kept = append(kept, e)
			sum += e.bytes
		}
	}
	s.mu.Unlock()
	clear(l.entries[len(kept):])
	l.entries = kept
	return sum
}
