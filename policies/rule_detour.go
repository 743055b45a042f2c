package policies

// detour: a request that a rule sends to replicas[i] (its history, its
// leading run, its home), where m blocks are believed resident, goes
// instead to the cheapest candidate when the prefill it would wait behind
// at i, its own uncached part included, exceeds the cheapest's by more
// than Options.DetourSlack times its prompt. Affinity alone queues a
// prefix's requests behind whatever prefill its replica has pending
// (Dynamo weighs every replica by its uncached prefill); the slack gives
// up the hit only for a wait longer than the prefill it saves. The prefix
// keeps its home; the detour leaves a copy that later requests may match.
func (c *candidates) detour(i, m int) bool {
	slack := int(c.s.opts.DetourSlack * float64(c.keys.Bytes))
	return i != c.cheap && queued(c.keys, &c.replicas[i], m) > c.cheapCost+slack
}

// queued is the prefill a request waits behind on r, believed uncached
// prompt bytes: what this router has pending there plus the request's own
// part beyond the m blocks resident there (Dynamo's uncached-prefill term).
func queued(keys Keys, r *Replica, m int) int {
	return r.PendingPrefill + UncachedBytes(keys, m)
}
