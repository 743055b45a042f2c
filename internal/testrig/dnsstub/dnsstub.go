// Package dnsstub is a tiny authoritative DNS server on a loopback UDP port
// for tests: it answers A, AAAA and SRV questions from records a test sets
// and changes at run time, so that a client's view of a name (Caddy's
// `dynamic a` and `dynamic srv` upstreams, a Kubernetes headless Service)
// can be made to change under it.
//
// It is deliberately small: UDP only, no recursion, no wildcards, no CNAME.
// A name with no records at all is NXDOMAIN; a known name without records
// of the asked type is an empty NOERROR answer (NODATA). Every answer is
// authoritative and carries the server's TTL (0 by default, so that no
// client should cache it).
package dnsstub

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/dns/dnsmessage"
)

// SRV is one SRV record's data.
type SRV struct {
	Priority, Weight, Port uint16
	// Target is the host name the record points at (made absolute).
	Target string
}

// Server is a running stub. Its methods are safe for concurrent use.
type Server struct {
	conn net.PacketConn
	ttl  atomic.Uint32

	mu   sync.Mutex
	ip   map[string][]netip.Addr // name -> A and AAAA data
	srv  map[string][]SRV        // name -> SRV data
	asks map[dnsmessage.Type]int // questions answered, per type

	done chan struct{}
	wg   sync.WaitGroup
}

// Start serves on 127.0.0.1 on a free UDP port until Close.
func Start() (*Server, error) {
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{
		conn: conn,
		ip:   map[string][]netip.Addr{},
		srv:  map[string][]SRV{},
		asks: map[dnsmessage.Type]int{},
		done: make(chan struct{}),
	}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Addr returns the server's 127.0.0.1:port.
func (s *Server) Addr() string { return s.conn.LocalAddr().String() }

// SetTTL sets the TTL, in seconds, of every later answer.
func (s *Server) SetTTL(seconds uint32) { s.ttl.Store(seconds) }

// canonical makes a name lower-case and absolute (with the final dot).
func canonical(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

// SetIP replaces name's A and AAAA records with ips (none removes them).
func (s *Server) SetIP(name string, ips ...netip.Addr) {
	name = canonical(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ips) == 0 {
		delete(s.ip, name)
		return
	}
	s.ip[name] = append([]netip.Addr(nil), ips...)
}

// AddIP adds ip to name's A or AAAA records, unless it is there already.
func (s *Server) AddIP(name string, ip netip.Addr) {
	name = canonical(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.ip[name] {
		if x == ip {
			return
		}
	}
	s.ip[name] = append(s.ip[name], ip)
}

// RemoveIP removes ip from name's records; it reports whether it was there.
func (s *Server) RemoveIP(name string, ip netip.Addr) bool {
	name = canonical(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.ip[name] {
		if x == ip {
			s.ip[name] = append(s.ip[name][:i:i], s.ip[name][i+1:]...)
			if len(s.ip[name]) == 0 {
				delete(s.ip, name)
			}
			return true
		}
	}
	return false
}

// SetSRV replaces name's SRV records with recs (none removes them).
func (s *Server) SetSRV(name string, recs ...SRV) {
	name = canonical(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(recs) == 0 {
		delete(s.srv, name)
		return
	}
	out := make([]SRV, len(recs))
	for i, r := range recs {
		r.Target = canonical(r.Target)
		out[i] = r
	}
	s.srv[name] = out
}

// AddSRV adds rec to name's SRV records, unless one with the same target
// and port is there already.
func (s *Server) AddSRV(name string, rec SRV) {
	name = canonical(name)
	rec.Target = canonical(rec.Target)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.srv[name] {
		if x.Target == rec.Target && x.Port == rec.Port {
			return
		}
	}
	s.srv[name] = append(s.srv[name], rec)
}

// RemoveSRV removes name's SRV record for target and port; it reports
// whether it was there.
func (s *Server) RemoveSRV(name, target string, port uint16) bool {
	name, target = canonical(name), canonical(target)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, x := range s.srv[name] {
		if x.Target == target && x.Port == port {
			s.srv[name] = append(s.srv[name][:i:i], s.srv[name][i+1:]...)
			if len(s.srv[name]) == 0 {
				delete(s.srv, name)
			}
			return true
		}
	}
	return false
}

// Queries returns how many questions of type t were answered so far.
func (s *Server) Queries(t dnsmessage.Type) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asks[t]
}

// Close stops the server and waits for it.
func (s *Server) Close() {
	select {
	case <-s.done:
		return
	default:
	}
	close(s.done)
	_ = s.conn.Close()
	s.wg.Wait()
}

func (s *Server) serve() {
	defer s.wg.Done()
	buf := make([]byte, 4096)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		resp, ok := s.answer(buf[:n])
		if !ok {
			continue // not a query we can parse: drop it, as servers do
		}
		_, _ = s.conn.WriteTo(resp, from)
	}
}

// answer builds the response to one query message.
func (s *Server) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	hdr, err := p.Start(query)
	if err != nil || hdr.Response {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	rh := dnsmessage.Header{
		ID: hdr.ID, Response: true, OpCode: hdr.OpCode, Authoritative: true,
		RecursionDesired: hdr.RecursionDesired, RecursionAvailable: true,
	}
	name := canonical(q.Name.String())
	ttl := s.ttl.Load()

	s.mu.Lock()
	ips, haveIP := s.ip[name]
	srvs, haveSRV := s.srv[name]
	ips = append([]netip.Addr(nil), ips...)
	srvs = append([]SRV(nil), srvs...)
	s.asks[q.Type]++
	s.mu.Unlock()

	switch {
	case hdr.OpCode != 0:
		rh.RCode = dnsmessage.RCodeNotImplemented
	case q.Class != dnsmessage.ClassINET:
		rh.RCode = dnsmessage.RCodeRefused
	case !haveIP && !haveSRV:
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	if rh.RCode == dnsmessage.RCodeSuccess {
		rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: ttl}
		switch q.Type {
		case dnsmessage.TypeA:
			for _, ip := range ips {
				if ip.Is4() {
					if err := b.AResource(rr, dnsmessage.AResource{A: ip.As4()}); err != nil {
						return nil, false
					}
				}
			}
		case dnsmessage.TypeAAAA:
			for _, ip := range ips {
				if ip.Is6() && !ip.Is4In6() {
					if err := b.AAAAResource(rr, dnsmessage.AAAAResource{AAAA: ip.As16()}); err != nil {
						return nil, false
					}
				}
			}
		case dnsmessage.TypeSRV:
			for _, r := range srvs {
				target, err := dnsmessage.NewName(r.Target)
				if err != nil {
					return nil, false
				}
				if err := b.SRVResource(rr, dnsmessage.SRVResource{
					Priority: r.Priority, Weight: r.Weight, Port: r.Port, Target: target,
				}); err != nil {
					return nil, false
				}
			}
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, false
	}
	return out, true
}
