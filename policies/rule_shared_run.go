package policies

// sharedRun: a believed match held on two or more replicas is a prefix
// that many conversations share (a system prompt sent as user text, the
// head of a common document), not one conversation's history. It counts
// as the leading run, and the request's home is ranked and recorded by
// its first block past it. A router that never saw a conversation's
// earlier turns (traffic split across routers that share no state) so
// ranks it by the conversation's own opening, as the router that placed
// it did, instead of sending every conversation to the home of the
// prefix they all share; and history (followHistory) means a match past
// what the replicas hold in common.
//
// second is the longest match held by at least two Free replicas (the
// second-longest of their matches). It returns how many leading blocks
// count as shared: second when it passes the request's own leading run
// and leaves at least one block of the request past it (the block the
// home is ranked by), else the request's own leading run.
func (c *candidates) sharedRun(second int) int {
	if second < c.s.opts.MinMatchBlocks || second <= c.keys.LeadingBlocks || second >= len(c.keys.Blocks) {
		return c.keys.LeadingBlocks
	}
	return second
}
