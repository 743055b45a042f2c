package policies

// returnHome: a prefix believed resident nowhere that has a recorded home
// came back (the index forgot it, or another router placed it): it goes
// home when that is within the cold bound and this router may follow it,
// else to its rendezvous home within the cold bound.
func (c *candidates) returnHome() (int, int, bool) {
	c.recall()
	switch {
	case c.known == "":
		return -1, 0, false
	case c.at >= 0 && c.cold.Admits(&c.replicas[c.at]):
		return c.at, c.matchAt(c.at), true
	}
	return c.rendezvous, c.rvMatch, true
}
