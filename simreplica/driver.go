package simreplica

import (
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
)

// maxLag is how far the driver may fall behind its schedule before it
// stops catching up (after a pause it resumes from now instead of
// replaying the backlog in a burst).
const maxLag = 50 * time.Millisecond

// driver runs an engine in real time on one goroutine: it steps the engine,
// sleeps the step's modelled duration, then hands the step's events to the
// subscriptions of their requests.
type driver struct {
	mu   sync.Mutex // guards eng and subs
	eng  *simengine.Engine
	subs map[uint64]*subscription

	wake chan struct{} // a Submit happened (capacity 1)
	quit chan struct{}
	done chan struct{}
	once sync.Once
}

func newDriver(eng *simengine.Engine) *driver {
	d := &driver{
		eng:  eng,
		subs: make(map[uint64]*subscription),
		wake: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go d.run()
	return d
}

func (d *driver) run() {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var next time.Time // when the current step ends on the wall clock
	for {
		d.mu.Lock()
		if d.eng.Idle() {
			d.mu.Unlock()
			select {
			case <-d.wake:
				next = time.Time{}
				continue
			case <-d.quit:
				return
			}
		}
		dt, events := d.eng.Step()
		d.mu.Unlock()

		now := time.Now()
		if next.IsZero() || now.Sub(next) > maxLag {
			next = now
		}
		next = next.Add(dt)
		if wait := next.Sub(now); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-d.quit:
				return
			}
		}
		d.deliver(events)
	}
}

// deliver hands events to their subscriptions. The events of one request
// in one step (a token and its Finished) are pushed together, so a reader
// sees a last token and the finish at once.
func (d *driver) deliver(events []simengine.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i := 0; i < len(events); {
		j := i + 1
		for j < len(events) && events[j].ID == events[i].ID {
			j++
		}
		id := events[i].ID
		if sub, ok := d.subs[id]; ok {
			sub.push(events[i:j])
			if events[j-1].Kind == simengine.EventFinished {
				delete(d.subs, id)
			}
		}
		i = j
	}
}

// submit queues r in the engine; its events go to the returned
// subscription.
func (d *driver) submit(r simengine.Request) (*subscription, error) {
	sub := newSubscription()
	d.mu.Lock()
	err := d.eng.Submit(r)
	if err == nil {
		d.subs[r.ID] = sub
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return sub, nil
}

// cancel drops a request whose client went away.
func (d *driver) cancel(id uint64) {
	d.mu.Lock()
	d.eng.Cancel(id)
	delete(d.subs, id)
	d.mu.Unlock()
}

// restart restarts the engine, aborting every request in it.
func (d *driver) restart() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := d.eng.Restart()
	for _, id := range ids {
		if sub, ok := d.subs[id]; ok {
			sub.abort()
			delete(d.subs, id)
		}
	}
	return len(ids)
}

// resetPrefixCache forgets all cached content.
func (d *driver) resetPrefixCache() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.ResetPrefixCache()
}

// stats returns the engine's stats.
func (d *driver) stats() simengine.Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.Stats()
}

// cachedPrefixTokens asks the engine how much of tokens is cached.
func (d *driver) cachedPrefixTokens(tokens []uint32) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.eng.CachedPrefixTokens(tokens)
}

// close stops the goroutine and aborts every subscription. It waits for
// the goroutine to exit and is idempotent.
func (d *driver) close() {
	d.once.Do(func() {
		close(d.quit)
		<-d.done
		d.mu.Lock()
		for id, sub := range d.subs {
			sub.abort()
			delete(d.subs, id)
		}
		d.mu.Unlock()
	})
}

// subscription is one request's unbounded event queue.
type subscription struct {
	mu      sync.Mutex
	events  []simengine.Event
	aborted bool
	notify  chan struct{} // capacity 1: something to read
}

func newSubscription() *subscription {
	return &subscription{notify: make(chan struct{}, 1)}
}

func (s *subscription) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

func (s *subscription) push(evs []simengine.Event) {
	s.mu.Lock()
	s.events = append(s.events, evs...)
	s.mu.Unlock()
	s.signal()
}

func (s *subscription) abort() {
	s.mu.Lock()
	s.aborted = true
	s.mu.Unlock()
	s.signal()
}

// take returns the queued events (emptying the queue) and whether the
// request was aborted by a restart or shutdown.
func (s *subscription) take() ([]simengine.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	evs := s.events
	s.events = nil
	return evs, s.aborted
}
