package policies

// followHistory: a request whose believed match reaches past its shared
// leading run carries its own conversation's history, which is cached
// where that match is. The longest match among the candidates wins, ties
// to the higher rendezvous rank.
func (c *candidates) followHistory() (int, int, bool) {
	if c.warm && c.bestMatch > c.keys.LeadingBlocks {
		return c.best, c.bestMatch, true
	}
	return -1, 0, false
}
