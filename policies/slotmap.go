package policies

import "math/rand/v2"

// slotMap is blockLRU's map from block hash to slot: open addressing with
// linear probing over a power-of-two table of keys and slots, deleted
// entries closed up by shifting their successors back (no tombstones). A
// placed prompt adds and evicts hundreds of blocks, so these operations
// are most of Select's work under churn: this table compares a key where
// a Go map hashes it and walks its groups (BenchmarkIndexPlace). Keys are
// block hashes, already uniform, but a client chooses its prompts: they
// are mixed with a seed of the table's own, so that no one can aim blocks
// at one probe run. Neither slice holds a pointer.
type slotMap struct {
	keys []uint64
	// slots holds each entry's slot, 0 for an empty entry (slot 0 is the
	// LRU's sentinel, never stored).
	slots []int32
	mask  uint64
	seed  uint64
	n     int
}

// minSlotMap is the smallest table: it grows by doubling as the store
// fills, as the store's slots do.
const minSlotMap = 64

func newSlotMap() slotMap {
	return slotMap{keys: make([]uint64, minSlotMap), slots: make([]int32, minSlotMap), mask: minSlotMap - 1, seed: rand.Uint64()}
}

// home is key's first entry.
func (m *slotMap) home(key uint64) uint64 { return mix64(key^m.seed) & m.mask }

// get returns key's slot.
func (m *slotMap) get(key uint64) (int32, bool) {
	for i := m.home(key); ; i = (i + 1) & m.mask {
		s := m.slots[i]
		if s == 0 {
			return 0, false
		}
		if m.keys[i] == key {
			return s, true
		}
	}
}

// put sets key's slot (s > 0) and reports whether key was held already.
func (m *slotMap) put(key uint64, s int32) (held bool) {
	if 4*(m.n+1) > 3*len(m.slots) {
		m.grow()
	}
	for i := m.home(key); ; i = (i + 1) & m.mask {
		switch {
		case m.slots[i] == 0:
			m.keys[i], m.slots[i] = key, s
			m.n++
			return false
		case m.keys[i] == key:
			m.slots[i] = s
			return true
		}
	}
}

// del removes key, when held: the entries after it in its probe run that
// may move back into the gap do, so that every key stays reachable from
// its home without a tombstone.
func (m *slotMap) del(key uint64) {
	i := m.home(key)
	for ; ; i = (i + 1) & m.mask {
		if m.slots[i] == 0 {
			return
		}
		if m.keys[i] == key {
			break
		}
	}
	for j := (i + 1) & m.mask; m.slots[j] != 0; j = (j + 1) & m.mask {
		// The entry at j may fill the gap at i unless its home lies
		// cyclically in (i, j]: then it would move before its home.
		if h := m.home(m.keys[j]); (j-h)&m.mask >= (j-i)&m.mask {
			m.keys[i], m.slots[i] = m.keys[j], m.slots[j]
			i = j
		}
	}
	m.slots[i] = 0
	m.n--
}

// grow doubles the table.
func (m *slotMap) grow() {
	keys, slots := m.keys, m.slots
	m.keys = make([]uint64, 2*len(keys))
	m.slots = make([]int32, 2*len(slots))
	m.mask = uint64(len(m.slots) - 1)
	m.n = 0
	for i, s := range slots {
		if s != 0 {
			m.put(keys[i], s)
		}
	}
}

// clear empties the table, keeping its size.
func (m *slotMap) clear() {
	clear(m.slots)
	m.n = 0
}

// len is the number of keys held.
func (m *slotMap) len() int { return m.n }
