package policies

import "github.com/cespare/xxhash/v2"

// Rendezvous returns the highest-random-weight score of key on the replica
// addr: the replica with the highest score is key's home, the next highest
// its second choice, and so on. Every router instance computes the same
// ranking from the same key and addresses, with no shared state, and when a
// replica leaves only the keys homed on it move (about 1/N of them).
//
// The score is xxhash64 of addr mixed with key through splitmix64; it does
// not allocate.
func Rendezvous(key uint64, addr string) uint64 {
	return rank(key, HashAddr(addr))
}

// HashAddr is the hash of a replica's address that Rendezvous mixes with a
// key; a caller that keeps it per replica passes it as Replica.AddrHash.
func HashAddr(addr string) uint64 { return xxhash.Sum64String(addr) }

// rank is Rendezvous from the address's hash.
func rank(key, addrHash uint64) uint64 { return mix64(addrHash ^ mix64(key)) }

// rank returns Rendezvous(key, r.Addr), from r.AddrHash when it is set
// (one hash of the address fewer per replica and decision).
func (r *Replica) rank(key uint64) uint64 {
	h := r.AddrHash
	if h == 0 {
		h = HashAddr(r.Addr)
	}
	return rank(key, h)
}

// mix64 is splitmix64's finalizer: a bijective mix whose output bits each
// depend on every input bit.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
