package policies

import (
	"time"

	"github.com/llmroute/caddy-llmroute/internal/stats"
)

// SlotEstimate is what a slot engine's recent requests took, from which
// HoldWait decides whether a request of a running prompt should wait for
// that prompt's slot (the module's slot_hold): Span is how long a request
// holds its slot, PrefillPerByte the time to first byte per uncached
// prompt byte of mostly uncached prompts (moving averages, the newest
// sample weighted 1/5). Not safe for concurrent use.
type SlotEstimate struct {
	span, prefill stats.EWMA // seconds, seconds per byte
}

// slotGain is the weight of the newest sample in SlotEstimate's averages.
const slotGain = 1.0 / 5

// Observe adds a finished request: how long it held its slot, its time to
// first byte and how many of its prompt's bytes were uncached (0:
// unknown, or mostly cached, which says nothing of a miss's cost).
func (e *SlotEstimate) Observe(span, ttft time.Duration, uncachedBytes int) {
	if span > 0 {
		e.span.Add(span.Seconds(), slotGain)
	}
	if ttft > 0 && uncachedBytes > 0 {
		e.prefill.Add(ttft.Seconds()/float64(uncachedBytes), slotGain)
	}
}

// Span is how long a request holds its slot, 0 until observed.
func (e *SlotEstimate) Span() time.Duration { return seconds(e.span.Value()) }

// PrefillPerByte is a miss's time to first byte per uncached prompt byte,
// 0 until observed.
func (e *SlotEstimate) PrefillPerByte() time.Duration { return seconds(e.prefill.Value()) }

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// HoldWait decides for a request of promptBytes whose prompt is running
// in `running` requests, the oldest for ran, with `waiting` requests of it
// already waiting: it waits (ok) when the slot is expected to come to it
// (the oldest's remaining span, plus a span per waiter ahead shared among
// the running ones) before its own prefill uncached would end, and then at
// most that prefill, and never past limit. Until both estimates are
// learned (or without a prompt size) it waits up to limit, as configured.
func (e *SlotEstimate) HoldWait(ran time.Duration, running, waiting, promptBytes int, limit time.Duration) (time.Duration, bool) {
	if e.span.N() == 0 || e.prefill.N() == 0 || promptBytes <= 0 {
		return limit, true
	}
	span := e.Span()
	expect := max(span-ran, 0) + time.Duration(waiting)*span/time.Duration(max(running, 1))
	own := seconds(e.prefill.Value() * float64(promptBytes))
	if expect >= own {
		return 0, false
	}
	return min(limit, own), true
}
