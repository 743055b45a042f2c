package policies

import "sync/atomic"

// PeerMode says whether other clients (router instances) send to the same
// replicas.
type PeerMode int

const (
	// PeersAuto infers it from the engines' metrics: an engine that runs
	// and queues well more requests than this router has in flight there
	// serves others too (peerSense). Until the metrics say, and when
	// there are none, it assumes peers.
	PeersAuto PeerMode = iota
	// PeersNone: this router is the engines' only client.
	PeersNone
	// PeersSome: other router instances (or clients) share the engines.
	PeersSome
)

// peerSense infers from the Replica views it is shown whether other
// clients load the engines. With one router, an engine's running plus
// waiting count is about what the router had in flight there when the
// engine was sampled (InFlight - InFlightSinceSample; judged against the
// count now, a burst or a lull since the scrape passes for peers or their
// absence); with n routers about n times that.
// Views are summed until this router's side holds at least 4 requests
// (one view under load, several at low concurrency: a lone gateway with 2
// in flight must still learn that it is alone), and each such sum is one
// piece of evidence; a score with hysteresis turns them into a stable
// answer.
type peerSense struct {
	score atomic.Int32
	peers atomic.Bool
	// sum holds the views summed since the last piece of evidence: this
	// router's in-flight count in the high 32 bits, the engines' in the
	// low (one word, so that Pick takes no lock for it).
	sum atomic.Uint64
}

const (
	peerScoreMax = 64
	peerScoreOn  = 48 // peers from here up
	peerScoreOff = 16 // no peers from here down
	// peerEvidenceMin is the in-flight count, summed over views, that
	// makes one piece of evidence: below it, a scrape's staleness could
	// pass for another router.
	peerEvidenceMin = 4
)

func newPeerSense() *peerSense {
	p := &peerSense{}
	p.score.Store(peerScoreMax / 2)
	p.peers.Store(true)
	return p
}

// observe weighs one view.
func (p *peerSense) observe(replicas []Replica) {
	eng, own, known := 0, 0, false
	for i := range replicas {
		r := &replicas[i]
		if r.EngineRunning < 0 {
			continue
		}
		known = true
		eng += r.EngineRunning + max(r.EngineWaiting, 0)
		own += max(r.InFlight-r.InFlightSinceSample, 0)
	}
	if !known || own == 0 {
		// Nothing of this router's to compare with (an engine still busy
		// with what it sent before the scrape is no evidence of peers).
		return
	}
	for {
		old := p.sum.Load()
		o := old>>32 + uint64(own)
		e := min(old&0xffffffff+uint64(eng), 0xffffffff)
		if o < peerEvidenceMin {
			if p.sum.CompareAndSwap(old, o<<32|e) {
				return
			}
			continue
		}
		if p.sum.CompareAndSwap(old, 0) {
			eng, own = int(e), int(o)
			break
		}
	}
	var d int32
	switch {
	case 2*eng >= 3*own+4: // at least 1.5x what this router sent, and 2 more
		d = 1
	case 4*own <= 5*eng && 4*eng <= 5*own: // what it sent, 0.8x to 1.25x
		// (Judged at sample time, a little less than it sent is requests
		// still on their way to the engine or ended there but not yet at
		// the router. Much less is no evidence either way.)
		d = -1
	default:
		return
	}
	sc := min(max(p.score.Add(d), 0), peerScoreMax)
	p.score.Store(sc)
	switch {
	case sc >= peerScoreOn:
		p.peers.Store(true)
	case sc <= peerScoreOff:
		p.peers.Store(false)
	}
}
