package policies

// spillHot: a prefix believed resident only on replicas over the load
// bound is hot. It spills to the highest-ranked candidate, which every
// router computes alike, so that the spill builds one second copy rather
// than one per router.
func (c *candidates) spillHot() (int, int, bool) {
	if c.spill && !c.warm {
		return c.top, c.topMatch, true
	}
	return -1, 0, false
}
