package caddymodule

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
// drops the others as it goes. The entries live in the replica's state,
// under its lock; the sum is published with the rest of the replica's live
// view (replicaview.go) whenever an entry is added or an attempt's prefill ends.

// prefillEntry is one attempt's contribution.
type prefillEntry struct {
	a     *attempt
	bytes int
}

// addPending counts bytes of prefill for a, which must still be prefilling
// (its caller holds no lock).
func addPending(a *attempt, bytes int) {
	if bytes <= 0 {
		return
	}
	s := a.rep
	s.mu.Lock()
	s.prefill = append(s.prefill, prefillEntry{a: a, bytes: bytes})
	s.unlock()
}

// pendingPrefill is the replica's pending prefill now, in bytes.
func pendingPrefill(s *replicaState) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pendingPrefillLocked()
}

// pendingPrefillLocked is pendingPrefill with s.mu held (it guards the
// attempts' prefilling and released flags too).
func (s *replicaState) pendingPrefillLocked() int {
	if len(s.prefill) == 0 {
		return 0
	}
	sum := 0
	kept := s.prefill[:0]
	for _, e := range s.prefill {
		if e.a.prefilling && !e.a.released {
			kept = append(kept, e)
			sum += e.bytes
		}
	}
	clear(s.prefill[len(kept):])
	s.prefill = kept
	return sum
}
