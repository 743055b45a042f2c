package policies

import "sync"

// Homes: where a prefix lives once its first request has been placed.
//
// prefix_load places a new prefix by load (its first request is a cold
// prefill wherever it goes, so it goes where that prefill waits least) and
// remembers the choice as the prefix's home. Later requests that find no
// believed-resident prefix (the index forgot it, or another router placed
// it) go home, and so do requests that match only the prefix's shared
// leading part. A one-off document is thus spread like least-loaded
// traffic, and a reusable system prompt settles where its first request
// went.
//
// A router's own table is the truth only when it is the only router:
// several instances each remember their own first placements, which differ.
// With peers and no shared Directory, prefix_load falls back to the
// rendezvous home, which every instance computes alike.

// Directory is a table of homes that several router instances share, so
// that they agree on where a prefix placed by load lives. Implementations
// must be safe for concurrent use and must answer quickly: Pick calls Home
// for requests that match no believed-resident prefix or only its leading
// part, and Claim once per prefix it takes for new. An implementation
// backed by a remote store answers Home from what it has learnt (no round
// trip), spends one round trip per Claim, and says when the store could
// not answer rather than waiting for it.
type Directory interface {
	// Home returns the address recorded as key's home, if known.
	Home(key uint64) (addr string, ok bool)
	// Claim records addr as key's home unless a home is already recorded,
	// and returns the recorded home (addr when this call recorded it);
	// ok is false when the directory could not answer, and prefix_load
	// then places the prefix as it would with no directory.
	Claim(key uint64, addr string) (home string, ok bool)
}

// homeTableBits sizes a router's own home table: 32,768 slots (about 768
// KiB). It is direct-mapped: a key keeps its slot until another key hashes
// there, so it survives about 32,768 newer prefixes (an hour and a half of
// one-off documents at 6 per second).
const homeTableBits = 15

// HomeTable is a router's own table of homes: a bounded, direct-mapped
// Directory. It is safe for concurrent use, costs one lock per call and
// never allocates.
type HomeTable struct {
	mu    sync.Mutex
	slots []homeSlot
}

type homeSlot struct {
	key  uint64
	addr string
}

// NewHomeTable returns an empty table of 1<<bits slots (bits < 1 selects
// the default, 32,768 slots).
func NewHomeTable(bits int) *HomeTable {
	if bits < 1 {
		bits = homeTableBits
	}
	return &HomeTable{slots: make([]homeSlot, 1<<bits)}
}

func (t *HomeTable) slot(key uint64) *homeSlot {
	return &t.slots[mix64(key)&uint64(len(t.slots)-1)]
}

// Home returns key's recorded home.
func (t *HomeTable) Home(key uint64) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.slot(key)
	if s.key != key || s.addr == "" {
		return "", false
	}
	return s.addr, true
}

// Claim records addr as key's home unless one is recorded (a key that
// lost its slot to another is not recorded any more) and returns the
// recorded home; it always answers.
func (t *HomeTable) Claim(key uint64, addr string) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.slot(key)
	if s.key == key && s.addr != "" {
		return s.addr, true
	}
	*s = homeSlot{key: key, addr: addr}
	return addr, true
}

// Learn records addr as key's home, replacing what was recorded: for a
// cache of a shared directory's answers.
func (t *HomeTable) Learn(key uint64, addr string) {
	t.mu.Lock()
	*t.slot(key) = homeSlot{key: key, addr: addr}
	t.mu.Unlock()
}

// HomeStore is the store several routers share a Directory through
// (Valkey or Redis in the module, a map in the simulator): one atomic
// set-if-absent per new prefix, and nothing else.
type HomeStore interface {
	// ClaimHome records addr as key's home unless one is recorded, and
	// returns the recorded home (addr when this call recorded it); ok is
	// false when the store did not answer.
	ClaimHome(key uint64, addr string) (home string, ok bool)
}

// LaterHomeStore is a HomeStore that can also claim off the caller's
// path.
type LaterHomeStore interface {
	HomeStore
	// ClaimHomeLater makes ClaimHome's claim and calls done with its
	// answer once it has one, without waiting for it. It may drop the
	// claim (done then never runs), as when too many are out.
	ClaimHomeLater(key uint64, addr string, done func(home string, ok bool))
}

// LaterClaimer is a Directory that can claim off the request's path:
// prefix_load uses it for new prefixes during a unique run (traffic that
// has shared nothing for Options.UniqueRun requests), where the claim's
// answer is almost always "yours" and waiting for it only adds its round
// trip to the request.
type LaterClaimer interface {
	// ClaimLater makes Claim's claim and calls done with its answer (once
	// the Directory has learnt it), without waiting for the store when
	// the store can answer later; done may never run.
	ClaimLater(key uint64, addr string, done func(home string, ok bool))
}

// StoreDirectory is a router's Directory over a shared HomeStore. Claim
// asks the store; Home answers from the store's answers this router has
// received, with no round trip. So a router learns a prefix's home from
// its own Claim: its first request of a prefix another router placed
// takes the prefix for new, claims, and is told where it lives.
type StoreDirectory struct {
	store HomeStore
	cache *HomeTable
}

// NewStoreDirectory returns a Directory over store with an empty cache.
func NewStoreDirectory(store HomeStore) *StoreDirectory {
	return &StoreDirectory{store: store, cache: NewHomeTable(0)}
}

// Home returns the home the store gave this router for key.
func (d *StoreDirectory) Home(key uint64) (string, bool) { return d.cache.Home(key) }

// Claim asks the store to record addr as key's home unless it has one,
// and caches its answer; ok is false when the store did not answer.
func (d *StoreDirectory) Claim(key uint64, addr string) (string, bool) {
	home, ok := d.store.ClaimHome(key, addr)
	if ok {
		d.cache.Learn(key, home)
	}
	return home, ok
}

// ClaimLater implements LaterClaimer: through the store's ClaimHomeLater
// when it has one (LaterHomeStore), else as Claim, before it returns.
func (d *StoreDirectory) ClaimLater(key uint64, addr string, done func(home string, ok bool)) {
	ls, ok := d.store.(LaterHomeStore)
	if !ok {
		done(d.Claim(key, addr))
		return
	}
	ls.ClaimHomeLater(key, addr, func(home string, ok bool) {
		if ok {
			d.cache.Learn(key, home)
		}
		done(home, ok)
	})
}
