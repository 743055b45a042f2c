package e2e

import (
	"math"
	"testing"
)

// TestFirstAgreement: per leading key, each router's first answered
// request counts, later ones and requests without a replica header do
// not, and a key seen by one router is left out.
func TestFirstAgreement(t *testing.T) {
	sent := []Arrival{
		{Router: 0, Leading: 1}, // key 1: router 0 first at a
		{Router: 1, Leading: 1}, // router 1 first at a: agree
		{Router: 1, Leading: 1}, // a later request at b: not a first
		{Router: 0, Leading: 2}, // key 2: router 0 at a
		{Router: 1, Leading: 2}, // no replica header: left out
		{Router: 1, Leading: 2}, // router 1's first answered at b: disagree
		{Router: 0, Leading: 3}, // key 3: one router only
		{Router: 2, Leading: 0}, // no key
	}
	outs := []Outcome{{Replica: "a"}, {Replica: "a"}, {Replica: "b"}, {Replica: "a"}, {}, {Replica: "b"}, {Replica: "c"}, {Replica: "a"}}
	if keys, agreement := firstAgreement(sent, outs, 3); keys != 2 || math.Abs(agreement-0.5) > 1e-9 {
		t.Errorf("firstAgreement = %d keys, %.3f; want 2, 0.500", keys, agreement)
	}
	if keys, agreement := firstAgreement(sent[:1], outs[:1], 3); keys != 0 || agreement != 0 {
		t.Errorf("one router's key: %d keys, %.3f; want none", keys, agreement)
	}
}
