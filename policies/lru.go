package policies

import "math"

// blockLRU is the residency index's store: a bounded set of block hashes in
// least-recently-used order, with the semantics of golang-lru's simplelru
// (Add moves a held key to the front, a new key past the capacity evicts
// the least recent, Contains does not touch recency, Resize evicts from the
// back) and no pointers: the keys' order is a doubly linked list of slot
// indices in one slice, found through a table from key to slot (slotMap).
// Neither holds a pointer, so the garbage collector does not walk them:
// simplelru's list elements are one heap object with three pointers per
// block, which a large pool's indexes (64 replicas at
// DefaultIndexCapacity are a million blocks) make the collector visit on
// every cycle (BenchmarkIndexGC). It also takes half the memory
// (TestIndexBytesPerEntry).
//
// Each key has a weight (blockWeight of its place in its chain): the
// capacity and the length count weights, so that a deep block standing
// for many bytes of prompt takes as much of the capacity.
//
// It is not safe for concurrent use; Index locks around it.
type blockLRU struct {
	// slots[0] is the list's sentinel: its next is the most recent key,
	// its prev the least recent. Slots of evicted keys are reused
	// through free.
	slots []lruSlot
	// shift holds each slot's weight as a power of two (weight 1<<shift),
	// beside slots so that a slot stays 16 bytes.
	shift []uint8
	at    slotMap // key -> slot
	// free is the first reusable slot (chained through next), 0 for none.
	free int32
	len  int // the weights held
	size int // the most weight held
}

// lruSlot is one key and its neighbours in recency order.
type lruSlot struct {
	key        uint64
	prev, next int32
}

// maxLRUSize bounds a blockLRU: slot indices are int32.
const maxLRUSize = math.MaxInt32 - 1

// newBlockLRU returns an empty store holding at most size keys (>= 1).
func newBlockLRU(size int) *blockLRU {
	l := &blockLRU{at: newSlotMap()}
	l.slots = make([]lruSlot, 1, 1+min(size, 1024))
	l.shift = make([]uint8, 1, cap(l.slots))
	l.size = min(size, maxLRUSize)
	return l
}

// Contains reports whether key is held, without touching recency.
func (l *blockLRU) Contains(key uint64) bool {
	_, ok := l.at.get(key)
	return ok
}

// Add makes key the most recent, adding it with weight 1<<shift (and
// evicting the least recent keys past the capacity) when it is not held.
func (l *blockLRU) Add(key uint64, shift uint8) {
	if i, ok := l.at.get(key); ok {
		l.moveFront(i, i)
		return
	}
	l.addNew(key, shift)
}

// addNew is Add of a key the caller knows is not held, without looking it
// up first: most of a new prompt's blocks (AddChain).
func (l *blockLRU) addNew(key uint64, shift uint8) {
	w := 1 << shift
	for l.len+w > l.size && l.slots[0].prev != 0 {
		l.removeOldest()
	}
	var i int32
	if l.free != 0 {
		i = l.free
		l.free = l.slots[i].next
	} else {
		if len(l.slots) == cap(l.slots) {
			// Grow by doubling, but never past the capacity (and its
			// sentinel): a full store holds no unused slots.
			grown := make([]lruSlot, len(l.slots), min(2*cap(l.slots), l.size+1))
			copy(grown, l.slots)
			l.slots = grown
			shifts := make([]uint8, len(l.shift), cap(grown))
			copy(shifts, l.shift)
			l.shift = shifts
		}
		l.slots = append(l.slots, lruSlot{})
		l.shift = append(l.shift, 0)
		i = int32(len(l.slots) - 1)
	}
	l.slots[i].key = key
	l.shift[i] = shift
	l.pushFront(i, i)
	held := l.at.put(key, i)
	l.len += w
	if held && key != 0 { // free slots hold key 0
		l.dropStale(key, i) // it was held after all: see addNew's callers
	}
}

// dropStale frees the slot other than keep that holds key: addNew found
// key held, which AddChain's caller said it was not (only a collision of
// 64-bit block hashes could make the index's leading-run rule wrong). A
// walk of the slots: it is never expected to run.
func (l *blockLRU) dropStale(key uint64, keep int32) {
	for j := int32(1); j < int32(len(l.slots)); j++ {
		if j != keep && l.slots[j].key == key {
			l.release(j) // the table holds keep for key now
			return
		}
	}
}

// chainShift is the weight, as a power of two, of the i-th block of a
// chain (blockWeight).
func chainShift(i int) uint8 {
	if i < denseBlocks {
		return 0
	}
	return uint8(min(1+(i-denseBlocks)/sparseRun, maxDoublings))
}

// AddChain is Add of each key of a chain (keys[0] its head, each key
// weighed by its place) from the last to the first, with the same
// result, in less time when the chain's head is held and a run of the
// chain follows it in the recency list, as a prefix shared by many
// requests does once they have been placed: that run is found by walking
// the list from the head (no map lookup per key) and moved to the front in
// one splice, instead of one lookup and relink per key. The keys after the
// run are added one by one first, as Add would (those from absent on, which
// the caller knows are not held, without looking them up), and when that
// evicted the run's oldest key the run is added one by one too. It returns
// the length of the run it moved in one splice (0: none).
func (l *blockLRU) AddChain(keys []uint64, absent int) int {
	first, held := l.at.get(keys[0])
	m, last := 0, int32(0)
	if held {
		m, last = 1, first
		for m < len(keys) {
			j := l.slots[last].next
			if j == 0 || l.slots[j].key != keys[m] {
				break
			}
			last, m = j, m+1
		}
	}
	for i := len(keys) - 1; i >= max(m, absent); i-- {
		l.addNew(keys[i], chainShift(i))
	}
	for i := min(absent, len(keys)) - 1; i >= m; i-- {
		l.Add(keys[i], chainShift(i))
	}
	if m == 0 {
		return 0
	}
	// Eviction takes the least recent key first: the run is intact while
	// its oldest key, keys[m-1], is still held where it was.
	if j, ok := l.at.get(keys[m-1]); ok && j == last {
		l.moveFront(first, last)
		return m
	}
	for i := m - 1; i >= 0; i-- {
		l.Add(keys[i], chainShift(i))
	}
	return 0
}

// moveFront moves the linked run of slots from first to last (first the
// most recent) to the front, keeping its order: what Add of its keys from
// last to first does when all are held.
func (l *blockLRU) moveFront(first, last int32) {
	if l.slots[0].next == first {
		return
	}
	l.unlink(first, last)
	l.pushFront(first, last)
}

// Len returns the weight held: the number of keys when every key weighs 1.
func (l *blockLRU) Len() int { return l.len }

// Resize changes the capacity (in weight), evicting the least recent keys
// past it.
func (l *blockLRU) Resize(size int) {
	l.size = min(max(size, 1), maxLRUSize)
	for l.len > l.size && l.slots[0].prev != 0 {
		l.removeOldest()
	}
}

// Purge removes every key.
func (l *blockLRU) Purge() {
	l.at.clear()
	l.slots = l.slots[:1]
	l.slots[0] = lruSlot{}
	l.shift = l.shift[:1]
	l.free, l.len = 0, 0
}

// removeOldest evicts the least recent key.
func (l *blockLRU) removeOldest() {
	i := l.slots[0].prev
	if i == 0 {
		return
	}
	l.at.del(l.slots[i].key)
	l.release(i)
}

// release takes slot i out of the recency list and its weight out of the
// length, and makes it reusable; the table is the caller's to mend.
func (l *blockLRU) release(i int32) {
	l.unlink(i, i)
	l.len -= 1 << l.shift[i]
	l.slots[i] = lruSlot{next: l.free}
	l.free = i
}

// unlink takes the linked run of slots from first to last (first the
// more recent; first == last for one slot) out of the recency list.
func (l *blockLRU) unlink(first, last int32) {
	prev, next := l.slots[first].prev, l.slots[last].next
	l.slots[prev].next = next
	l.slots[next].prev = prev
}

// pushFront links the run from first to last (first == last for one
// slot) as the most recent, in its order.
func (l *blockLRU) pushFront(first, last int32) {
	front := l.slots[0].next
	l.slots[first].prev = 0
	l.slots[last].next = front
	l.slots[front].prev = last
	l.slots[0].next = first
}
