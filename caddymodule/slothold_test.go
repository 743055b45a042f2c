package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
	"github.com/llmroute/caddy-llmroute/policies"
)

// TestSlotHoldsEnter proves the hold's rules on a fake clock: a prompt
// that nothing runs passes at once; a second and a third request of a
// running prompt wait, and each request that ends hands its place to the
// first waiter, one at a time, in arrival order; the bound lets a waiter
// go beside the running one; a client that leaves gets no place; other
// prompts never wait; and every place is given back.
//
// It runs in a synctest bubble so that quiet can prove a waiter did not
// pass: once every goroutine of the bubble is blocked, one that could
// pass would have sent its outcome already.
func TestSlotHoldsEnter(t *testing.T) {
	synctest.Test(t, testSlotHoldsEnter)
}

func testSlotHoldsEnter(t *testing.T) {
	clk := clockwork.NewFakeClock()
	h := newSlotHolds(clk)
	ctx := context.Background()
	type entered struct {
		place *holdPlace
		out   holdOutcome
	}
	enter := func(head uint64, timers int) chan entered {
		ch := make(chan entered, 1)
		go func() {
			p, out := h.enter(ctx, head, 1000, time.Second)
			ch <- entered{p, out}
		}()
		require.NoError(t, clk.BlockUntilContext(ctx, timers)) // it waits on its bound
		return ch
	}
	quiet := func(chs ...chan entered) {
		t.Helper()
		synctest.Wait()
		for _, ch := range chs {
			select {
			case e := <-ch:
				t.Fatalf("passed while the prompt ran: %v", e.out)
			default:
			}
		}
	}
	got := func(ch chan entered, want holdOutcome) *holdPlace {
		t.Helper()
		select {
		case e := <-ch:
			require.Equal(t, want, e.out)
			return e.place
		case <-time.After(5 * time.Second):
			t.Fatalf("still waiting, want %s", want)
		}
		return nil
	}
	first, out := h.enter(ctx, 1, 1000, time.Second)
	require.Equal(t, holdNone, out)
	other, out := h.enter(ctx, 2, 1000, time.Second)
	require.Equal(t, holdNone, out, "another prompt does not wait")

	second := enter(1, 1)
	third := enter(1, 2)
	quiet(second, third)
	h.leave(first, holdSample{})
	p2 := got(second, holdEnded) // the first waiter takes the place
	quiet(third)
	h.leave(p2, holdSample{})
	p3 := got(third, holdEnded)

	// The bound: a waiter goes beside the running one.
	fourth := enter(1, 1)
	clk.Advance(time.Second)
	p4 := got(fourth, holdTimeout)

	// A client that leaves while it waits gets no place.
	cctx, cancel := context.WithCancel(ctx)
	gone := make(chan holdOutcome, 1)
	go func() {
		p, out := h.enter(cctx, 1, 1000, time.Second)
		assert.Nil(t, p)
		gone <- out
	}()
	require.NoError(t, clk.BlockUntilContext(ctx, 1))
	cancel()
	assert.Equal(t, holdGone, <-gone)

	h.leave(p3, holdSample{})
	assert.Equal(t, 2, h.holding(), "a prompt with a request left still runs")
	h.leave(p4, holdSample{})
	h.leave(other, holdSample{})
	assert.Zero(t, h.holding(), "every place given back")
}

// TestSlotHoldsWaitWhenWorthIt proves that enter follows the learned
// decision (policies.SlotEstimate.HoldWait, tabled there): the finished
// requests' samples reach the estimate, a request whose prefill would
// outlast the running one's remaining span waits, one whose prefill is
// quicker runs beside it at once (skipped), and nothing stays counted.
func TestSlotHoldsWaitWhenWorthIt(t *testing.T) {
	clk := clockwork.NewFakeClock()
	h := newSlotHolds(clk)
	ctx := context.Background()
	// Learned: requests hold their slot 100 ms; a miss takes 1 ms per
	// uncached byte to its first byte.
	p, _ := h.enter(ctx, 9, 1000, time.Minute)
	h.leave(p, holdSample{span: 100 * time.Millisecond, ttft: 500 * time.Millisecond, uncachedBytes: 500})
	require.Equal(t, 100*time.Millisecond, h.est.Span())
	require.Equal(t, time.Millisecond, h.est.PrefillPerByte())

	run, out := h.enter(ctx, 1, 1000, time.Minute)
	require.Equal(t, holdNone, out)
	next, out := h.enter(ctx, 1, 50, time.Minute) // 50 ms of prefill < 100 ms left
	assert.Equal(t, holdSkipped, out)
	h.leave(next, holdSample{})

	waits := make(chan holdOutcome, 1)
	go func() {
		p, out := h.enter(ctx, 1, 1000, time.Minute) // 1 s of prefill > 100 ms left
		h.leave(p, holdSample{})
		waits <- out
	}()
	require.NoError(t, clk.BlockUntilContext(ctx, 1))
	h.mu.Lock()
	waiting := len(h.running[1].waiting)
	h.mu.Unlock()
	assert.Equal(t, 1, waiting, "it waits")
	h.leave(run, holdSample{})
	assert.Equal(t, holdEnded, <-waits)
	assert.Zero(t, h.holding())
}

// TestSelectSlotHold proves slot_hold through the policy: a request whose
// prompt is running waits in Select until that request is settled, then
// goes; with slot_hold off it goes at once; and nothing stays counted
// after the requests end.
func TestSelectSlotHold(t *testing.T) {
	freshSlotTracker(t)
	keys := answerKeys(t)
	for _, hold := range []time.Duration{0, time.Minute} {
		t.Run(time.Duration(hold).String(), func(t *testing.T) {
			p := barePolicy(t, 4)
			p.SlotHold = caddy.Duration(hold)
			require.NoError(t, p.setup())
			s := newSelector(t, p)
			pool := dynPool("slothold-" + hold.String() + ".invalid:8000")
			sel := func() (chan string, *routeCtx) {
				r, rc := routedRequest(t, context.Background())
				rc.req = &policies.Request{Keys: keys}
				s.rcs = append(s.rcs, rc)
				ch := make(chan string, 1)
				go func() {
					addr := ""
					if up := p.Select(pool, r, nil); up != nil {
						addr = up.Dial
					}
					ch <- addr
				}()
				return ch, rc
			}
			ch1, rc1 := sel()
			require.NotEmpty(t, <-ch1)
			ch2, rc2 := sel()
			if hold == 0 {
				require.NotEmpty(t, <-ch2, "no hold: it goes at once")
				assert.Nil(t, p.holds)
				return
			}
			// Listed as waiting, it stays in enter until the running
			// request ends (or a minute passes): nothing else lets it go.
			waitFor(t, "the second request held", func() bool { return p.holds.status(0).Waiting == 1 })
			select {
			case <-ch2:
				t.Fatal("went while a request of its prompt ran")
			default:
			}
			rc1.finish(neutralEnd)
			select {
			case addr := <-ch2:
				require.NotEmpty(t, addr)
			case <-time.After(5 * time.Second):
				t.Fatal("still held after the running request ended")
			}
			rc2.finish(neutralEnd)
			assert.Zero(t, p.holds.holding(), "nothing left counted")
			s.rcs = nil
		})
	}
}

// TestSlotHoldThroughCaddy proves slot_hold end to end: through Caddy, a
// request whose prompt is running on the replica does not reach it until
// that one's answer has ended (the handler's end gives its place back);
// a request of another prompt is not held; every request is answered 200
// and nothing stays reserved or counted.
func TestSlotHoldThroughCaddy(t *testing.T) {
	freshSlotTracker(t)
	a := newFake(t)
	hold := make(chan struct{})
	a.setHold(hold)
	r := startRouter(t, slotHoldSite("slot_hold 20s", a))
	sys := "the group's system prompt " + strings.Repeat("s", 400)
	first := postRunning(t, r, a, "hold-1", sys)
	second := postAsync(t, r, a, "hold-2", sys)
	other := postAsync(t, r, a, "hold-other", "another prompt altogether "+strings.Repeat("o", 400))
	waitFor(t, "the other prompt at the replica", func() bool { return a.count("hold-other") == 1 })
	// Once held, it leaves the hold only when the first request ends,
	// which the fake holds back.
	waitHeld(t, r, 1)
	assert.Zero(t, a.count("hold-2"), "reached the replica while its prompt ran")
	slotHold := func() *stateapi.SlotHold {
		st := r.state()
		require.Len(t, st.Policies, 1)
		require.NotNil(t, st.Policies[0].SlotHold, "/llm_route/state shows slot_hold")
		return st.Policies[0].SlotHold
	}
	sh := slotHold()
	assert.Equal(t, 20*time.Second, sh.Limit)
	assert.Equal(t, 2, sh.Prompts, "two prompts running")
	assert.Equal(t, 1, sh.Waiting, "one request waiting")
	close(hold)
	for _, ch := range []chan int{first, second, other} {
		assert.Equal(t, 200, <-ch)
	}
	assert.Equal(t, 1, a.count("hold-2"))
	r.requireDrained(a.addr)
	sh = slotHold()
	assert.Zero(t, sh.Prompts, "every place given back")
	assert.Zero(t, sh.Waiting)
	assert.Positive(t, sh.Span, "the answers taught it how long a slot is held")
}

// TestSlotHoldSurvivesReload proves that a reload keeps the hold: a
// request of a prompt still running under the old config's policy waits
// under the new one's until that request ends, then goes; nothing leaks.
func TestSlotHoldSurvivesReload(t *testing.T) {
	freshSlotTracker(t)
	a := newFake(t)
	hold := make(chan struct{})
	a.setHold(hold)
	site := func(cap int) string {
		return slotHoldSite(fmt.Sprintf("max_in_flight %d\n\t\t\tslot_hold 20s", cap), a)
	}
	r := startRouter(t, site(4))
	sys := "a prompt running across a reload " + strings.Repeat("r", 400)
	first := postRunning(t, r, a, "reload-1", sys)
	r.load(site(8))
	second := postAsync(t, r, a, "reload-2", sys)
	waitHeld(t, r, 1)
	assert.Zero(t, a.count("reload-2"), "reached the replica while its prompt ran")
	close(hold)
	assert.Equal(t, 200, <-first)
	assert.Equal(t, 200, <-second)
	assert.Equal(t, 1, a.count("reload-2"))
	r.requireDrained(a.addr)
	assert.Zero(t, slotTracker.holding(), "every place given back")
}

// TestSlotHoldReleasedByBrokenStream proves that a request whose stream
// breaks still hands its place on: the replica cuts the first request's
// stream midway (the client sees it broken: no [DONE]; the replica cools),
// and the request held behind it then goes, once, to the healthy replica,
// and gets its whole answer; nothing stays reserved or held, and no
// request was sent twice.
func TestSlotHoldReleasedByBrokenStream(t *testing.T) {
	freshSlotTracker(t)
	a, b := newFake(t), newFake(t)
	hold := make(chan struct{})
	a.setHold(hold)
	b.setHold(hold)
	r := startRouter(t, slotHoldSite("slot_hold 20s", a, b))
	sys := "a prompt whose first stream breaks " + strings.Repeat("b", 400)
	type streamed struct {
		status int
		done   bool
	}
	send := func(id, fault string) chan streamed {
		ch := make(chan streamed, 1)
		go func() {
			resp := post(t, r.url("/v1/chat/completions"), "", id, fault, chatBody(sys, "q "+id, true))
			_, done, _ := readSSE(resp)
			ch <- streamed{resp.StatusCode, done}
		}()
		return ch
	}
	seen := func(id string) int { return a.count(id) + b.count(id) }
	first := send("broken-1", "cut")
	waitFor(t, "the first request at a replica", func() bool { return seen("broken-1") == 1 })
	second := send("broken-2", "")
	waitHeld(t, r, 1)
	assert.Zero(t, seen("broken-2"))
	close(hold) // the first streams three chunks, then its connection is cut
	got := <-first
	assert.Equal(t, 200, got.status)
	assert.False(t, got.done, "the broken stream reached the client as whole")
	got = <-second
	assert.Equal(t, 200, got.status)
	assert.True(t, got.done, "the held request's answer is whole")
	assert.Equal(t, 1, seen("broken-1"), "the broken stream was not sent again")
	assert.Equal(t, 1, seen("broken-2"))
	r.requireDrained(a.addr, b.addr)
	assert.Zero(t, slotTracker.holding(), "no place kept")
}

// TestSlotHoldClientLeaves proves that a client leaving while its request
// is held costs nothing: the held request never reaches the replica, the
// running one ends whole, no place is kept, and the next request of the
// prompt goes at once.
func TestSlotHoldClientLeaves(t *testing.T) {
	freshSlotTracker(t)
	a := newFake(t)
	hold := make(chan struct{})
	a.setHold(hold)
	r := startRouter(t, slotHoldSite("slot_hold 20s", a))
	sys := "a prompt whose waiter leaves " + strings.Repeat("l", 400)
	first := postRunning(t, r, a, "leave-1", sys)
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(chatBody(sys, "q2", false)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", "leave-2")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		left <- err
	}()
	waitHeld(t, r, 1)
	cancel()
	require.Error(t, <-left)
	waitHeld(t, r, 0)
	close(hold)
	assert.Equal(t, 200, <-first)
	assert.Zero(t, a.count("leave-2"), "a request whose client left reached the replica")
	r.requireDrained(a.addr)
	assert.Zero(t, slotTracker.holding(), "no place kept")
	resp := post(t, r.url("/v1/chat/completions"), "", "leave-3", "", chatBody(sys, "q3", false))
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, 200, resp.StatusCode, "the next request of the prompt goes at once")
}

// freshSlotTracker gives the test a package-level slot tracker of its own
// (nothing learned: every hold waits up to slot_hold), for the policies it
// sets up, and puts the old one back after.
func freshSlotTracker(t *testing.T) {
	old := slotTracker
	slotTracker = newSlotHolds(clockwork.NewRealClock())
	t.Cleanup(func() { slotTracker = old })
}

// slotHoldSite is llm_route in front of reverse_proxy to the fakes with
// lb_policy llm { opts }.
func slotHoldSite(opts string, fakes ...*fake) string {
	addrs := make([]string, len(fakes))
	for i, f := range fakes {
		addrs[i] = f.addr
	}
	return fmt.Sprintf("\n\tllm_route\n\treverse_proxy %s {\n\t\tlb_policy llm {\n\t\t\t%s\n\t\t}\n\t}", strings.Join(addrs, " "), opts)
}

// postAsync posts a chat request (id, system prompt sys) through r in
// the background and sends its status once its answer is read.
func postAsync(t *testing.T, r *router, f *fake, id, sys string) chan int {
	ch := make(chan int, 1)
	go func() {
		// A connection error before any answer that f never saw is sent
		// again (right after a reload, the old server may take and drop
		// a new connection); the status is -1 when it cannot be sent.
		var unread atomic.Int64
		resp, err := postRetryUnread(r.url("/v1/chat/completions"), id, chatBody(sys, "q "+id, false),
			func() int { return f.count(id) }, &unread)
		if err != nil {
			t.Errorf("request %s: %v", id, err)
			ch <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		ch <- resp.StatusCode
	}()
	return ch
}

// postRunning is postAsync of a request that runs at once: it returns
// once f has the request.
func postRunning(t *testing.T, r *router, f *fake, id, sys string) chan int {
	t.Helper()
	ch := postAsync(t, r, f, id, sys)
	waitFor(t, "the first request at the replica", func() bool { return f.count(id) == 1 })
	return ch
}

// waitHeld waits until the live policy (the last listed) has slot_hold
// with n requests waiting.
func waitHeld(t *testing.T, r *router, n int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%d requests held", n), func() bool {
		st := r.state()
		if len(st.Policies) == 0 {
			return false
		}
		sh := st.Policies[len(st.Policies)-1].SlotHold
		return sh != nil && sh.Waiting == n
	})
}

// TestSlotHoldBurst proves the hold under a burst of one prompt: 60
// concurrent requests of it (each answer streamed over ~0.6 s) with a
// 50 ms slot_hold wait, are handed places or time out and go beside,
// some clients leaving while held; every request that stayed is answered
// whole and once, and afterwards nothing is held, waiting or reserved.
func TestSlotHoldBurst(t *testing.T) {
	freshSlotTracker(t)
	a, b := newFake(t), newFake(t)
	r := startRouter(t, slotHoldSite("max_in_flight 64\n\t\t\tslot_hold 50ms", a, b))
	sys := "one prompt, many requests at once " + strings.Repeat("m", 400)
	const n = 60
	var wg sync.WaitGroup
	done := make([]bool, n)
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%10 == 9 {
				time.AfterFunc(20*time.Millisecond, cancel) // leaves while held, or early in its answer
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url("/v1/chat/completions"), strings.NewReader(chatBody(sys, fmt.Sprintf("q%d", i), true)))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Request-Id", fmt.Sprintf("burst-%d", i))
			req.Header.Set("X-Fake", "slow")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			codes[i] = resp.StatusCode
			_, done[i], _ = readSSE(resp)
		}()
	}
	wg.Wait()
	for i := range n {
		if i%10 == 9 {
			continue
		}
		assert.Equal(t, 200, codes[i], "request %d", i)
		assert.True(t, done[i], "request %d whole", i)
		assert.Equal(t, 1, a.count(fmt.Sprintf("burst-%d", i))+b.count(fmt.Sprintf("burst-%d", i)), "request %d sent once", i)
	}
	r.requireDrained(a.addr, b.addr)
	waitFor(t, "nothing held", func() bool { return slotTracker.holding() == 0 })
	sh := r.state().Policies[0].SlotHold
	assert.Zero(t, sh.Waiting)
}
