package policies

import (
	"bytes"
	"slices"
	"sync/atomic"

	"github.com/zeebo/xxh3"
)

// A coding agent sends the same tools, tens of kilobytes of them, with
// every turn of a session. toolsCache keeps the canonical forms of tools
// values seen again and again with the exact bytes they were read from,
// so that a fast path that finds those bytes where a tools value starts
// compares them (a memory compare, many times faster than reading them)
// instead of reading them again. The bytes of a JSON value determine
// where it ends and what it reads as, so a value equal to a cached one
// byte for byte is valid and has its canonical form, whatever follows
// it; anything else is read as usual.
//
// A bucket, found by a hash of a value's first bytes (one agent's built-in
// tools open every user's list alike), holds the last few values stored
// with that start, most recent first. A value is stored the second time
// it is read (a first reading only notes its hash), so that traffic whose
// tools never repeat does not copy them on every request. Buckets are
// immutable and swapped atomically; a lost race loses a cache update,
// never a value.

const (
	toolsBuckets    = 16        // buckets, found by a value's first bytes
	toolsPerBucket  = 4         // values kept per bucket
	toolsCacheProbe = 256       // first bytes hashed to find a bucket
	toolsCacheMax   = 128 << 10 // larger tools values are not kept
)

// toolsEntry is one cached tools value: raw, its bytes, and its canonical
// form of n tools.
type toolsEntry struct {
	raw   []byte
	canon []byte
	n     int
}

// toolsBucket is what one bucket holds: entries, most recent first, and
// the hashes of values read once.
type toolsBucket struct {
	entries []*toolsEntry
	seen    []uint64
}

var toolsCache [toolsBuckets]atomic.Pointer[toolsBucket]

// toolsBucketOf returns the bucket of a tools value at b[i:].
func toolsBucketOf(b []byte, i int) *atomic.Pointer[toolsBucket] {
	return &toolsCache[xxh3.Hash(b[i:min(len(b), i+toolsCacheProbe)])%toolsBuckets]
}

// cachedTools returns the entry of slot whose bytes b holds at i, or nil.
func cachedTools(slot *atomic.Pointer[toolsBucket], b []byte, i int) *toolsEntry {
	bk := slot.Load()
	if bk == nil {
		return nil
	}
	for _, e := range bk.entries {
		if len(b)-i >= len(e.raw) && bytes.Equal(b[i:i+len(e.raw)], e.raw) {
			return e
		}
	}
	return nil
}

// rememberTools records a tools value read from raw (n tools, canonical
// form canon) in slot: its hash the first time, copies of both the second.
func rememberTools(slot *atomic.Pointer[toolsBucket], raw, canon []byte, n int) {
	if len(raw) > toolsCacheMax {
		return
	}
	h := xxh3.Hash(raw)
	old := slot.Load()
	if old == nil {
		old = &toolsBucket{}
	}
	bk := &toolsBucket{entries: old.entries, seen: old.seen}
	if i := slices.Index(old.seen, h); i >= 0 {
		e := &toolsEntry{raw: bytes.Clone(raw), canon: bytes.Clone(canon), n: n}
		bk.entries = append([]*toolsEntry{e}, old.entries[:min(len(old.entries), toolsPerBucket-1)]...)
		bk.seen = slices.Delete(slices.Clone(old.seen), i, i+1)
	} else {
		bk.seen = append([]uint64{h}, old.seen[:min(len(old.seen), toolsPerBucket-1)]...)
	}
	slot.Store(bk)
}
