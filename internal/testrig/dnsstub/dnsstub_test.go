package dnsstub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/dns/dnsmessage"
)

// resolver returns a pure-Go resolver that asks only s.
func resolver(s *Server) *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", s.Addr())
		},
	}
}

func ipStrings(ips []net.IP) []string {
	out := make([]string, len(ips))
	for i, ip := range ips {
		out[i] = ip.String()
	}
	slices.Sort(out)
	return out
}

func srvStrings(rs []*net.SRV) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = fmt.Sprintf("%d %d %s:%d", r.Priority, r.Weight, r.Target, r.Port)
	}
	slices.Sort(out)
	return out
}

func TestResolverSeesChanges(t *testing.T) {
	s, err := Start()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	r := resolver(s)
	a := netip.MustParseAddr

	cases := []struct {
		name   string
		change func()
		// lookup is "ip4", "ip6", "ip" (LookupIP) or "srv".
		lookup, host string
		want         []string
		notFound     bool
	}{
		{name: "unknown name is NXDOMAIN", lookup: "ip4", host: "nothing.test.", notFound: true},
		{name: "A records", change: func() { s.SetIP("svc.test", a("127.0.0.2"), a("127.0.0.3")) },
			lookup: "ip4", host: "svc.test.", want: []string{"127.0.0.2", "127.0.0.3"}},
		{name: "names are case-insensitive and absolute", lookup: "ip4", host: "SVC.Test",
			want: []string{"127.0.0.2", "127.0.0.3"}},
		{name: "a joining address", change: func() { s.AddIP("svc.test.", a("127.0.0.4")) },
			lookup: "ip4", host: "svc.test.", want: []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}},
		{name: "adding twice keeps one", change: func() { s.AddIP("svc.test.", a("127.0.0.4")) },
			lookup: "ip4", host: "svc.test.", want: []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"}},
		{name: "a leaving address", change: func() { require.True(t, s.RemoveIP("svc.test.", a("127.0.0.3"))) },
			lookup: "ip4", host: "svc.test.", want: []string{"127.0.0.2", "127.0.0.4"}},
		{name: "AAAA of a v4-only name is empty, A and AAAA together give the v4",
			lookup: "ip", host: "svc.test.", want: []string{"127.0.0.2", "127.0.0.4"}},
		{name: "AAAA records", change: func() { s.AddIP("svc.test.", a("::1")) },
			lookup: "ip6", host: "svc.test.", want: []string{"::1"}},
		{name: "last address gone is NXDOMAIN", change: func() {
			s.SetIP("svc.test.")
		}, lookup: "ip4", host: "svc.test.", notFound: true},
		{name: "SRV records", change: func() {
			s.SetSRV("_llm._tcp.svc.test", SRV{Port: 8001, Target: "r1.svc.test"}, SRV{Priority: 1, Weight: 5, Port: 8002, Target: "r2.svc.test."})
		}, lookup: "srv", host: "_llm._tcp.svc.test.", want: []string{"0 0 r1.svc.test.:8001", "1 5 r2.svc.test.:8002"}},
		{name: "a joining SRV target", change: func() { s.AddSRV("_llm._tcp.svc.test.", SRV{Port: 8003, Target: "r3.svc.test"}) },
			lookup: "srv", host: "_llm._tcp.svc.test.", want: []string{"0 0 r1.svc.test.:8001", "0 0 r3.svc.test.:8003", "1 5 r2.svc.test.:8002"}},
		{name: "a leaving SRV target", change: func() { require.True(t, s.RemoveSRV("_llm._tcp.svc.test.", "r1.svc.test", 8001)) },
			lookup: "srv", host: "_llm._tcp.svc.test.", want: []string{"0 0 r3.svc.test.:8003", "1 5 r2.svc.test.:8002"}},
		{name: "removing what is not there", change: func() { require.False(t, s.RemoveSRV("_llm._tcp.svc.test.", "r1.svc.test", 8001)) },
			lookup: "srv", host: "_llm._tcp.svc.test.", want: []string{"0 0 r3.svc.test.:8003", "1 5 r2.svc.test.:8002"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.change != nil {
				c.change()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var got []string
			var err error
			if c.lookup == "srv" {
				var rs []*net.SRV
				_, rs, err = r.LookupSRV(ctx, "", "", c.host)
				got = srvStrings(rs)
			} else {
				var ips []net.IP
				ips, err = r.LookupIP(ctx, c.lookup, c.host)
				got = ipStrings(ips)
			}
			if c.notFound {
				var de *net.DNSError
				require.True(t, errors.As(err, &de), "want a DNS error, got %v (%v)", err, got)
				assert.True(t, de.IsNotFound, "want not found, got %v", de)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
	assert.Positive(t, s.Queries(dnsmessage.TypeA))
	assert.Positive(t, s.Queries(dnsmessage.TypeAAAA))
	assert.Positive(t, s.Queries(dnsmessage.TypeSRV))
}

func TestTTL(t *testing.T) {
	s, err := Start()
	require.NoError(t, err)
	t.Cleanup(s.Close)
	s.SetIP("ttl.test.", netip.MustParseAddr("127.0.0.9"))
	for _, ttl := range []uint32{0, 1} {
		s.SetTTL(ttl)
		q := dnsmessage.Message{
			Header:    dnsmessage.Header{ID: 7, RecursionDesired: true},
			Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName("ttl.test."), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
		}
		b, err := q.Pack()
		require.NoError(t, err)
		c, err := net.Dial("udp", s.Addr())
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		_, err = c.Write(b)
		require.NoError(t, err)
		buf := make([]byte, 512)
		n, err := c.Read(buf)
		require.NoError(t, err)
		c.Close()
		var m dnsmessage.Message
		require.NoError(t, m.Unpack(buf[:n]))
		assert.Equal(t, uint16(7), m.Header.ID)
		assert.True(t, m.Header.Authoritative)
		require.Len(t, m.Answers, 1)
		assert.Equal(t, ttl, m.Answers[0].Header.TTL)
		assert.Equal(t, [4]byte{127, 0, 0, 9}, m.Answers[0].Body.(*dnsmessage.AResource).A)
	}
}
