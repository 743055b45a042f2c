package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/dnsstub"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
)

// The dynamic tests run caddy with a real `dynamic a` or `dynamic srv`
// upstream source, answered by a DNS stub the test changes while caddy
// routes: replicas join and leave the way pods of a Kubernetes headless
// Service do. llmroute keys its per-replica state by dial address, purges a
// departed replica's index while its in-flight requests run to their end,
// and ramps a joining replica's cap over slow_start.

const (
	dynName    = "llm.test."
	dynSRVName = "_llm._tcp.llm.test."
	// dynRefresh is caddy's refresh interval of the dynamic source.
	dynRefresh = 200 * time.Millisecond
	// dynK is how many distinct prefixes a case sends per round.
	dynK = 120
)

// dynEnv is an env whose upstreams come from DNS.
type dynEnv struct {
	*env
	kind string // "a" or "srv"
	dns  *dnsstub.Server
	// keys[i] is the address llmroute knows replica i by (the dial address:
	// ip:port for dynamic a, target:port for dynamic srv); reps[i] is it.
	keys []string
	byKy map[string]int
}

// newDynEnv starts the DNS stub and n fake replicas, publishes the first
// inDNS of them, and starts caddy with a dynamic source of kind ("a": the
// replicas on 127.0.0.2, 127.0.0.3, ... with one port; "srv": distinct
// ports on 127.0.0.1 behind targets r0.llm.test., r1.llm.test., ...).
func newDynEnv(t *testing.T, kind string, n, inDNS int, cfg caddyproc.SiteConfig) *dynEnv {
	t.Helper()
	dns, err := dnsstub.Start()
	require.NoError(t, err)
	t.Cleanup(dns.Close)
	d := &dynEnv{
		env:  &env{t: t, tracker: fakereplica.NewTracker(), results: map[string]*result{}},
		kind: kind, dns: dns, byKy: map[string]int{},
	}
	switch kind {
	case "a":
		d.startSamePort(n)
		cfg.Dynamic = fmt.Sprintf("dynamic a %s %s {\n\trefresh %v\n\tresolvers %s\n\tversions ipv4\n}",
			dynName, d.port(), dynRefresh, dns.Addr())
	case "srv":
		for i := range n {
			rp, err := fakereplica.StartWith(d.tracker, fakereplica.Options{})
			require.NoError(t, err)
			t.Cleanup(rp.Close)
			d.reps = append(d.reps, rp)
			_, port, _ := net.SplitHostPort(rp.Addr())
			host := fmt.Sprintf("r%d.%s", i, dynName)
			dns.SetIP(host, netip.MustParseAddr("127.0.0.1"))
			d.keys = append(d.keys, net.JoinHostPort(host, port))
		}
		cfg.Dynamic = fmt.Sprintf("dynamic srv %s {\n\trefresh %v\n\tresolvers %s\n}", dynSRVName, dynRefresh, dns.Addr())
		// Caddy dials the SRV target by name: through the stub too.
		cfg.TransportResolvers = []string{dns.Addr()}
	default:
		t.Fatalf("unknown dynamic kind %q", kind)
	}
	for i, k := range d.keys {
		d.byKy[k] = i
	}
	for i := range inDNS {
		d.publish(i)
	}
	d.start(cfg)
	t.Cleanup(d.afterCase)
	return d
}

// warmUp waits until caddy sees the n replicas in DNS, sends dynK
// distinct prefixes once and returns the replica each went to; they must
// spread over all n.
func (d *dynEnv) warmUp(n int) []string {
	t := d.t
	d.waitSeen("start", func(st stateapi.State) bool { return len(st.Replicas) == n })
	before := d.route("warm", dynK, "first question")
	homes := map[string]int{}
	for _, r := range before {
		homes[r]++
	}
	t.Logf("%s: %d warm prefixes over %d replicas: %v", d.kind, dynK, n, homes)
	require.Len(t, homes, n, "warm prefixes should spread over every replica")
	return before
}

// startSamePort starts n replicas on 127.0.0.2.. with one port free on all.
func (d *dynEnv) startSamePort(n int) {
	t := d.t
	for try := 0; try < 20; try++ {
		addr, err := netx.FreeAddr()
		require.NoError(t, err)
		_, port, _ := net.SplitHostPort(addr)
		var reps []*fakereplica.Replica
		for i := range n {
			rp, err := fakereplica.StartWith(d.tracker, fakereplica.Options{ListenAddr: fmt.Sprintf("127.0.0.%d:%s", i+2, port)})
			if err != nil {
				break
			}
			reps = append(reps, rp)
		}
		if len(reps) == n {
			for _, rp := range reps {
				t.Cleanup(rp.Close)
				d.reps = append(d.reps, rp)
				d.keys = append(d.keys, rp.Addr())
			}
			return
		}
		for _, rp := range reps {
			rp.Close()
		}
	}
	t.Fatalf("no port free on 127.0.0.2-127.0.0.%d after 20 tries", n+1)
}

func (d *dynEnv) port() string {
	_, p, _ := net.SplitHostPort(d.keys[0])
	return p
}

// publish puts replica i into DNS; withdraw takes it out.
func (d *dynEnv) publish(i int) {
	switch d.kind {
	case "a":
		d.dns.AddIP(dynName, netip.MustParseAddrPort(d.keys[i]).Addr())
	case "srv":
		host, port, _ := net.SplitHostPort(d.keys[i])
		p, _ := strconv.Atoi(port)
		d.dns.AddSRV(dynSRVName, dnsstub.SRV{Port: uint16(p), Target: host})
	}
}

func (d *dynEnv) withdraw(i int) {
	var ok bool
	switch d.kind {
	case "a":
		ok = d.dns.RemoveIP(dynName, netip.MustParseAddrPort(d.keys[i]).Addr())
	case "srv":
		host, port, _ := net.SplitHostPort(d.keys[i])
		p, _ := strconv.Atoi(port)
		ok = d.dns.RemoveSRV(dynSRVName, host, uint16(p))
	}
	require.True(d.t, ok, "replica %d was not in DNS", i)
}

// prefixBody is a streamed chat request whose system prompt is distinct
// per (tag, i): a prefix of its own.
func prefixBody(tag string, i int, user string) string {
	system := fmt.Sprintf("Tenant %s-%d. %s", tag, i, strings.Repeat("You follow the house style guide. ", 20))
	b, _ := json.Marshal(map[string]any{
		"model": "test-model",
		"messages": []map[string]string{
			{"role": "system", "content": system},
			{"role": "user", "content": user},
		},
		"stream": true,
	})
	return string(b)
}

// route sends the K prefixes of tag one at a time and returns the replica
// (llmroute's address) each went to.
func (d *dynEnv) route(tag string, k int, user string) []string {
	t := d.t
	out := make([]string, k)
	for i := range k {
		res := d.do(newID(t), prefixBody(tag, i, user), nil)
		requireStreamComplete(t, res)
		out[i] = res.Header.Get(replicaHdr)
		_, ok := d.byKy[out[i]]
		require.True(t, ok, "prefix %d answered by unknown replica %q", i, out[i])
	}
	return out
}

// waitSeen sends probe requests until cond holds of the router state
// (bounded): caddy refreshes a dynamic source only when a request asks.
func (d *dynEnv) waitSeen(what string, cond func(stateapi.State) bool) time.Duration {
	t := d.t
	start := time.Now()
	for i := range 100 {
		res := d.do(newID(t), prefixBody("probe-"+what, i, "ping"), nil)
		requireStreamComplete(t, res)
		if cond(d.state()) {
			return time.Since(start)
		}
		time.Sleep(dynRefresh / 4)
	}
	t.Fatalf("%s: not seen after 100 probes (%v); state %+v", what, time.Since(start), d.state())
	return 0
}

func dynConfig(slowStart time.Duration) caddyproc.SiteConfig {
	cfg := baseConfig()
	cfg.Strategy = "prefix_load"
	cfg.MaxInFlight = 8
	cfg.QueueSize = 256
	cfg.QueueTimeout = 20 * time.Second
	cfg.SlowStart = slowStart
	// The fake replica remembers only its last 32 prompts: its cached-token
	// reports would contradict the index on every warm resend and purge it.
	// Without usage the index is the router's belief alone.
	cfg.NoUsage = true
	return cfg
}

func moved(a, b []string) (n int) {
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

func count(xs []string, x string) (n int) {
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// TestDynamicJoin: three replicas in DNS, a fourth joins while caddy routes
// under load. Its concurrency ramps with slow_start (no stampede), the
// warm prefixes stay where they are (the index), and the joiner becomes the
// rendezvous home of about a quarter of the new cold prefixes.
func TestDynamicJoin(t *testing.T) {
	for _, kind := range []string{"a", "srv"} {
		t.Run(kind, func(t *testing.T) { dynamicJoin(t, kind) })
	}
}

func dynamicJoin(t *testing.T, kind string) {
	const (
		n         = 3
		slowStart = 4 * time.Second
		workers   = 40
	)
	d := newDynEnv(t, kind, n+1, n, dynConfig(slowStart))
	joiner := d.keys[n]
	jrep := d.reps[n].Addr() // the joiner as the tracker knows it

	before := d.warmUp(n)
	require.Zero(t, count(before, joiner))

	// Held-stream load: more streams than the three replicas' slots. It
	// fills their whole caps only once their own slow start has passed,
	// which the wait for saturation below observes.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var sent, failed atomic.Int64
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000 && !stop.Load(); j++ {
				res := d.do(newID(t), prefixBody(fmt.Sprintf("load-%d", w), j, "stream please"),
					map[string]string{fakereplica.HeaderFault: fakereplica.FaultSlow, fakereplica.HeaderDelay: "100ms", fakereplica.HeaderChunks: "6"})
				sent.Add(1)
				if res.Err != nil || res.ReadErr != nil || !res.SawDone {
					failed.Add(1)
				}
			}
		}()
	}
	saturated := d.tracker.WaitFor(slowStart+10*time.Second, func(v fakereplica.View) bool {
		c := 0
		for _, rp := range d.reps[:n] {
			c += v.Concurrent(rp.Addr())
		}
		return c >= n*8
	})
	if !saturated {
		stop.Store(true)
		wg.Wait()
		t.Fatalf("the load did not fill the %d replicas' slots", n)
	}

	// The joiner appears in DNS; sample what it sees.
	t0 := time.Now()
	d.publish(n)
	type sample struct {
		at   time.Duration
		conc int
	}
	var samples []sample
	violations := 0
	for i := 0; i < 1000; i++ {
		c := d.tracker.Concurrent(jrep)
		at := time.Since(t0)
		if at > slowStart+1500*time.Millisecond {
			break
		}
		samples = append(samples, sample{at, c})
		// The cap at age a is max(1, floor(8 a / slow_start)), and llmroute
		// saw the joiner no earlier than t0.
		bound := max(1, int(8*float64(at)/float64(slowStart)))
		if c > bound {
			violations++
			t.Errorf("%s: joiner had %d concurrent requests %v after it appeared in DNS; slow_start allows %d", kind, c, at, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	d.waitIdle()

	var early, mid, late int
	var firstLoad time.Duration = -1
	for _, s := range samples {
		switch {
		case s.at < slowStart/4:
			early = max(early, s.conc)
		case s.at < slowStart/2:
			mid = max(mid, s.conc)
		case s.at >= slowStart:
			late = max(late, s.conc)
		}
		if s.conc > 0 && firstLoad < 0 {
			firstLoad = s.at
		}
	}
	t.Logf("%s: joiner ramp under %d held streams (slow_start %v, max_in_flight 8): first request %v after DNS; max concurrent %d in [0, %v), %d in [%v, %v), %d after %v; joiner max concurrent overall %d; %d samples, %d over the ramp; load %d requests, %d failed",
		kind, workers, slowStart, firstLoad, early, slowStart/4, mid, slowStart/4, slowStart/2, late, slowStart,
		d.tracker.MaxConcurrent(jrep), len(samples), violations, sent.Load(), failed.Load())
	assert.Zero(t, failed.Load(), "load requests failed")
	assert.LessOrEqual(t, early, 2, "no stampede: the first quarter of slow_start allows at most 2")
	assert.GreaterOrEqual(t, late, 6, "after slow_start the joiner should carry (nearly) a full cap under this load")
	assert.Greater(t, late, early)

	// The warm prefixes again: the index keeps them where they are.
	after := d.route("warm", dynK, "second question")
	m := moved(before, after)
	t.Logf("%s: join %d->%d: %d/%d warm prefixes moved (%.1f%%), %d to the joiner", kind, n, n+1, m, dynK, 100*float64(m)/dynK, count(after, joiner))
	assert.LessOrEqual(t, float64(m)/dynK, 0.05, "warm prefixes should stay on their replica")

	// New cold prefixes: the joiner is the home of about 1/(n+1).
	cold := d.route("cold", dynK, "a question")
	share := float64(count(cold, joiner)) / dynK
	per := map[string]int{}
	for _, r := range cold {
		per[r]++
	}
	t.Logf("%s: %d new cold prefixes over %d replicas: joiner got %d (%.1f%%, ideal %.1f%%); per replica %v",
		kind, dynK, n+1, count(cold, joiner), 100*share, 100.0/(n+1), per)
	assert.GreaterOrEqual(t, share, 0.10)
	assert.LessOrEqual(t, share, 0.42)
	d.checkOnce()
}

// TestDynamicLeave: four replicas in DNS; one leaves while streams are held
// on it. New requests avoid it, its prefixes (and only its) move, the held
// streams complete whole, and no reservation or index is left behind.
func TestDynamicLeave(t *testing.T) {
	for _, kind := range []string{"a", "srv"} {
		t.Run(kind, func(t *testing.T) { dynamicLeave(t, kind) })
	}
}

func dynamicLeave(t *testing.T, kind string) {
	const (
		n         = 4
		slowStart = 2 * time.Second
		held      = 3
		chunks    = 5
	)
	d := newDynEnv(t, kind, n, n, dynConfig(slowStart))
	first := time.Now()
	before := d.warmUp(n)
	const li = 1
	leaver := d.keys[li]
	var leaverPrefixes []int
	for i, r := range before {
		if r == leaver {
			leaverPrefixes = append(leaverPrefixes, i)
		}
	}
	require.GreaterOrEqual(t, len(leaverPrefixes), held)
	// The leaver's cap must allow the held streams. Its slow start runs
	// on the router's clock and /llm_route/state does not show a cap, so
	// the test waits the ramp out: first is taken before the first
	// request, at whose selection llmroute first saw the replicas, and
	// the margin covers the gap.
	time.Sleep(time.Until(first.Add(slowStart + 200*time.Millisecond)))

	// Hold streams on the leaver: its own warm prefixes go there.
	hdr := map[string]string{fakereplica.HeaderFault: fakereplica.FaultStep, fakereplica.HeaderChunks: strconv.Itoa(chunks)}
	var streams []*stream
	var heldIDs []string
	for h := range held {
		id := newID(t)
		s := d.open(id, prefixBody("warm", leaverPrefixes[h], "held question"), hdr)
		require.Equal(t, 200, s.res.Status)
		require.Equal(t, leaver, s.res.Header.Get(replicaHdr), "a held stream went elsewhere")
		ev, err := s.next()
		require.NoError(t, err)
		require.NotEmpty(t, ev)
		streams = append(streams, s)
		heldIDs = append(heldIDs, id)
	}
	st := d.state()
	rs, ok := st.Replica(leaver)
	require.True(t, ok)
	require.Equal(t, held, rs.InFlight)
	require.Positive(t, rs.IndexEntries)

	// The leaver leaves DNS; wait until llmroute noticed: it stays listed,
	// draining, its index purged, its held streams still counted.
	d.withdraw(li)
	var during stateapi.State
	took := d.waitSeen("leave", func(st stateapi.State) bool {
		during = st
		r, ok := st.Replica(leaver)
		return ok && r.Draining
	})
	lr, listed := during.Replica(leaver)
	t.Logf("%s: departure noticed %v after the DNS change; leaver listed=%v draining=%v in_flight=%d index=%d while %d streams held; total_in_flight=%d",
		kind, took, listed, lr.Draining, lr.InFlight, lr.IndexEntries, held, during.TotalInFlight)
	assert.Equal(t, held, lr.InFlight, "the held streams' reservations must stay visible while they drain")
	assert.Zero(t, lr.IndexEntries, "the leaver's index must be purged")

	// New requests avoid it; only its prefixes move.
	after := d.route("warm", dynK, "second question")
	m, others := 0, 0
	for i := range before {
		if before[i] == after[i] {
			continue
		}
		m++
		if before[i] != leaver {
			others++
		}
	}
	t.Logf("%s: leave %d->%d: %d/%d prefixes moved (%.1f%%, the leaver had %d); %d of the others moved",
		kind, n, n-1, m, dynK, 100*float64(m)/dynK, len(leaverPrefixes), others)
	assert.Zero(t, count(after, leaver), "a request went to the departed replica")
	assert.Equal(t, len(leaverPrefixes), m, "exactly the leaver's prefixes move")
	assert.Zero(t, others, "prefixes of the replicas that stayed must not move")
	assert.LessOrEqual(t, float64(m)/dynK, 0.45)

	// The held streams complete whole.
	for i, s := range streams {
		d.tracker.StepAll(heldIDs[i], chunks)
		res := s.finish()
		requireStreamComplete(t, res)
		assert.True(t, res.SawDone)
		want := ""
		for k := range chunks {
			want += fmt.Sprintf("tok%d ", k)
		}
		assert.Equal(t, want, streamContent(t, res), "held stream %s content", heldIDs[i])
	}
	end := d.waitIdle()
	lr, listed = end.Replica(leaver)
	t.Logf("%s: after the held streams ended: total_in_flight=%d queued=%d; leaver listed=%v",
		kind, end.TotalInFlight, end.Queued, listed)
	assert.False(t, listed, "a drained replica must leave the state (its state leaked)")
	d.checkOnce()
}

// waitIdle waits until no reservation is held and nothing queued.
func (d *dynEnv) waitIdle() stateapi.State {
	ctx, cancel := context.WithTimeout(context.Background(), idleWait+5*time.Second)
	defer cancel()
	st, err := d.caddy.WaitIdle(ctx, idleWait)
	require.NoError(d.t, err, "reservations left: %+v", st)
	require.Zero(d.t, st.TotalInFlight)
	require.Zero(d.t, st.Queued)
	return st
}

// checkOnce checks that every request reached a replica exactly once.
func (d *dynEnv) checkOnce() {
	d.mu.Lock()
	ids := make([]string, 0, len(d.results))
	for id := range d.results {
		ids = append(ids, id)
	}
	d.mu.Unlock()
	twice := 0
	for _, id := range ids {
		if n := len(d.tracker.Receipts(id)); n != 1 {
			twice++
			d.t.Errorf("request %s reached replicas %d times", id, n)
		}
	}
	d.t.Logf("%s: %d requests, %d not received exactly once", d.kind, len(ids), twice)
}

// streamContent joins the content deltas of a streamed answer.
func streamContent(t *testing.T, res *result) string {
	var sb strings.Builder
	for _, ev := range res.Events {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		require.NoError(t, json.Unmarshal([]byte(ev), &c), "event %q", ev)
		for _, ch := range c.Choices {
			sb.WriteString(ch.Delta.Content)
		}
	}
	return sb.String()
}
