package policies

import (
	"math/rand/v2"
	"testing"
)

// TestSlotMapMatchesMap is a differential test of slotMap against a Go
// map: random puts, gets and deletes over a small universe of keys (so
// that probe runs are long, wrap around the table's end and are closed
// up by deletes), through several growths, then a clear; after every
// operation the key it touched, and every 1,000 operations every key,
// must agree. The counts show each kind ran with keys held and not.
func TestSlotMapMatchesMap(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	m := newSlotMap()
	ref := map[uint64]int32{}
	universe := make([]uint64, 3000)
	for i := range universe {
		universe[i] = r.Uint64()
	}
	universe[0] = 0 // the zero key is a key like any other
	var puts, overwrites, hits, misses, dels, delMisses int
	check := func(op int, k uint64) {
		got, ok := m.get(k)
		want, wok := ref[k]
		if ok != wok || got != want {
			t.Fatalf("op %d: get(%x) = %d %v, want %d %v", op, k, got, ok, want, wok)
		}
	}
	for op := range 300000 {
		// The universe in use grows, so that the table grows too.
		k := universe[r.IntN(min(len(universe), 200+op/50))]
		switch x := r.IntN(10); {
		case x < 5:
			s := int32(1 + r.IntN(1<<20))
			_, held := ref[k]
			if got := m.put(k, s); got != held {
				t.Fatalf("op %d: put(%x) reported held %v, want %v", op, k, got, held)
			}
			if held {
				overwrites++
			} else {
				puts++
			}
			ref[k] = s
		case x < 8:
			if _, ok := ref[k]; ok {
				dels++
			} else {
				delMisses++
			}
			m.del(k)
			delete(ref, k)
		default:
			if _, ok := ref[k]; ok {
				hits++
			} else {
				misses++
			}
		}
		check(op, k)
		if m.len() != len(ref) {
			t.Fatalf("op %d: len %d, want %d", op, m.len(), len(ref))
		}
		if op%1000 == 999 {
			for _, u := range universe {
				check(op, u)
			}
		}
	}
	t.Logf("%d puts, %d overwrites, %d deletes (%d of absent keys), %d gets held, %d not; table %d for %d keys",
		puts, overwrites, dels, delMisses, hits, misses, len(m.slots), m.len())
	if puts < 50000 || overwrites < 50000 || dels < 50000 || delMisses < 20000 || hits < 10000 || misses < 5000 || len(m.slots) < 2048 {
		t.Fatal("too few cases of some kind, or the table never grew")
	}
	m.clear()
	for _, u := range universe {
		if _, ok := m.get(u); ok {
			t.Fatalf("%x held after clear", u)
		}
	}
	if m.len() != 0 {
		t.Fatalf("len %d after clear", m.len())
	}
}

// TestSlotMapSeeds: two tables place the same keys at different entries
// (the seed), so that a client cannot aim its blocks at one probe run of
// every router's table.
func TestSlotMapSeeds(t *testing.T) {
	a, b := newSlotMap(), newSlotMap()
	same := 0
	for k := range uint64(40) {
		if a.home(k) == b.home(k) {
			same++
		}
	}
	if same > 10 {
		t.Fatalf("%d of 40 keys have one home in both tables", same)
	}
}
