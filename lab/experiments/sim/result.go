package sim

import (
	"math"
	"time"

	"github.com/llmroute/caddy-llmroute/lab/experiments/workload"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// Result is what one run measured.
type Result struct {
	Policy string `json:"policy"`
	// Requests were issued; each either completed or failed (Errors),
	// exactly once. Abandoned counts the later turns of conversations
	// whose turn failed, which were never issued.
	Requests     int `json:"requests"`
	Completed    int `json:"completed"`
	Errors       int `json:"errors"`
	SubmitErrors int `json:"submit_errors"`
	Abandoned    int `json:"abandoned_turns"`
	Restarts     int `json:"restarts"`
	// Queued requests waited in a router queue (every replica at its cap).
	Queued   int `json:"router_queued"`
	MaxQueue int `json:"router_queue_max"`

	// Engine-reported tokens of completed requests.
	PromptTokens int64 `json:"prompt_tokens"`
	CachedTokens int64 `json:"cached_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// TokenHitRate is CachedTokens / PromptTokens.
	TokenHitRate float64 `json:"token_hit_rate"`

	// Latencies in milliseconds from arrival at the router (router queue
	// included): time to first token and to the last token.
	TTFT Dist `json:"ttft_ms"`
	E2E  Dist `json:"e2e_ms"`
	// QueueWait is the router-queue wait of the requests that waited.
	QueueWait Dist `json:"router_queue_wait_ms"`

	// Makespan runs from the first arrival to the last completion;
	// throughput is output tokens over it.
	MakespanS      float64 `json:"makespan_s"`
	ThroughputTokS float64 `json:"throughput_tok_s"`

	// Dispatched counts the requests sent to each replica (all routers);
	// LoadShare is each one's fraction and MaxMinLoadRatio the largest
	// over the smallest (a replica that got nothing counts as 1).
	Dispatched      []int     `json:"dispatched"`
	LoadShare       []float64 `json:"load_share"`
	MaxMinLoadRatio float64   `json:"max_min_load_ratio"`

	Preemptions uint64 `json:"preemptions"`
	Evictions   uint64 `json:"evictions"`

	Residency Residency `json:"residency"`

	// PeersShare is, for a strategy that infers whether it has peers
	// (prefix_load, policies.PeerSensor), the fraction of its placements
	// made while it believed other routers share the replicas (right: 1
	// with several routers, 0 with one). PeerFlips counts the changes of
	// that belief over every router, and FirstAloneS is the time in
	// seconds from the start of the run at which a router first believed
	// itself alone (0: never).
	PeersShare  float64 `json:"peers_share,omitempty"`
	PeerFlips   int     `json:"peer_flips,omitempty"`
	FirstAloneS float64 `json:"first_alone_s,omitempty"`
	peerPicks   int
	peerTrue    int

	// With several routers: AgreementKeys leading keys were seen by at
	// least two of them, and Agreement is the fraction of those that every
	// router sent to the same replica the first time it saw the key (when
	// the key was cold to that router): how well instances with no shared
	// state agree on where a new prefix lives.
	AgreementKeys int     `json:"agreement_keys,omitempty"`
	Agreement     float64 `json:"cold_agreement,omitempty"`
	agreed        int
	// SecondAgreement is the same for each router's second request of a
	// key: where the routers send a prefix once it has come back, which is
	// what keeps its later hits on one replica.
	SecondAgreementKeys int     `json:"second_agreement_keys,omitempty"`
	SecondAgreement     float64 `json:"second_agreement,omitempty"`
	secondAgreed        int

	// Rules (Config.RuleStats) are, per rule that placed a completed
	// request, what the engines held of its prompt at the decision.
	Rules map[policies.Reason]RuleStat `json:"rules,omitempty"`

	// Samples (KeepSamples): TTFT and latency of every completed request.
	TTFTSamples []float64 `json:"-"`

	first, last time.Duration
	thinking    int
	ttft, e2e   []float64
	queueWait   []float64
	keep        bool
}

// Dist summarises a latency distribution in milliseconds. Quantiles holds
// the 0th, 1st, ..., 100th percentiles, enough to redraw its CDF.
type Dist struct {
	N         int       `json:"n"`
	Mean      float64   `json:"mean"`
	P50       float64   `json:"p50"`
	P90       float64   `json:"p90"`
	P99       float64   `json:"p99"`
	Max       float64   `json:"max"`
	Quantiles []float64 `json:"quantiles,omitempty"`
}

// Residency compares, for every completed request, the router's belief
// about the chosen replica's cache with the truth, in engine tokens. The
// index's belief is in router blocks of the canonical rendering; it is
// converted to tokens with the request's own bytes-per-token ratio, as the
// module's metrics do. Truth is the engine's cached prefix of the prompt
// at the moment of the decision (engine.CachedPrefixTokens); "reported" is
// what the engine reported at admission (usage cached_tokens), which is
// what the module's feedback sees.
type Residency struct {
	Checked         int   `json:"checked"`
	PredictedTokens int64 `json:"predicted_tokens"`
	TrueTokens      int64 `json:"true_tokens"`
	OverlapTokens   int64 `json:"overlap_tokens"`
	ReportedTokens  int64 `json:"reported_tokens"`
	OverlapReported int64 `json:"overlap_reported_tokens"`
	// Precision: share of predicted-resident tokens the engine had;
	// Recall: share of the engine's cached prefix the index predicted.
	Precision         float64 `json:"precision"`
	Recall            float64 `json:"recall"`
	PrecisionReported float64 `json:"precision_reported"`
	RecallReported    float64 `json:"recall_reported"`
	// The module's per-request classification against reported tokens.
	Hits   int `json:"hits"`
	Misses int `json:"misses"`
	// Partials: predicted, less than half of it reported.
	Partials int `json:"partials"`
	Cold     int `json:"cold"`
	// Concurrent: predicted, none reported, sent while another request of
	// that prefix was still before its first token on the replica.
	Concurrent      int     `json:"concurrent"`
	ModulePrecision float64 `json:"module_precision"`
	// Boundary: over requests where both the index and the engine had a
	// prefix, the mean of predicted minus true tokens (positive: the index
	// overshoots the engine's last full block).
	BoundaryN       int     `json:"boundary_n"`
	BoundaryMeanTok float64 `json:"boundary_mean_tokens"`
	BoundaryAbsTok  float64 `json:"boundary_mean_abs_tokens"`
	PurgesCounters  int     `json:"purges_counters_reset"`
	PurgesMisses    int     `json:"purges_hits_collapsed"`
	MeanIndexCap    float64 `json:"mean_final_index_capacity"`
	boundarySum     float64
	boundaryAbs     float64
	finalIndexCap   int
	finalIndexN     int
}

func newResult(cfg Config, w *workload.Workload) *Result {
	r := &Result{Policy: cfg.Policy, first: -1, keep: cfg.KeepSamples}
	if cfg.RuleStats {
		r.Rules = map[policies.Reason]RuleStat{}
	}
	return r
}

// record accounts one finished (ok) or failed request.
func (r *Result) record(s *Sim, f *flight, ok bool, u simengine.Usage) {
	if r.first < 0 || f.arrival < r.first {
		r.first = f.arrival
	}
	if s.now > r.last {
		r.last = s.now
	}
	if !ok {
		r.Errors++
		return
	}
	r.Completed++
	if s.cfg.RuleStats {
		r.Rules[f.why] = r.Rules[f.why].add(f, u.PromptTokens)
	}
	r.PromptTokens += int64(u.PromptTokens)
	r.CachedTokens += int64(u.CachedTokens)
	r.OutputTokens += int64(u.CompletionTokens)
	r.ttft = append(r.ttft, (f.firstTok-f.arrival).Seconds()*1000)
	r.e2e = append(r.e2e, (s.now-f.arrival).Seconds()*1000)

	res := &r.Residency
	res.Checked++
	pred := policies.PredictedTokens(f.predicted, s.blockSize, f.req.PromptBytes, u.PromptTokens)
	res.PredictedTokens += int64(pred)
	res.TrueTokens += int64(f.trueTok)
	res.OverlapTokens += int64(min(pred, f.trueTok))
	res.ReportedTokens += int64(u.CachedTokens)
	res.OverlapReported += int64(min(pred, u.CachedTokens))
	switch policies.Classify(f.predicted, f.concurrent, u.CachedTokens, pred) {
	case policies.CheckHit:
		res.Hits++
	case policies.CheckConcurrent:
		res.Concurrent++
	case policies.CheckMiss:
		res.Misses++
	case policies.CheckPartial:
		res.Partials++
	default:
		res.Cold++
	}
	if pred > 0 && f.trueTok > 0 {
		d := float64(pred - f.trueTok)
		res.BoundaryN++
		res.boundarySum += d
		res.boundaryAbs += math.Abs(d)
	}
}

func (r *Result) summarize() {
	if r.PromptTokens > 0 {
		r.TokenHitRate = float64(r.CachedTokens) / float64(r.PromptTokens)
	}
	if r.peerPicks > 0 {
		r.PeersShare = float64(r.peerTrue) / float64(r.peerPicks)
	}
	if r.keep {
		r.TTFTSamples = append([]float64(nil), r.ttft...)
	}
	r.TTFT = dist(r.ttft, true)
	r.E2E = dist(r.e2e, true)
	r.QueueWait = dist(r.queueWait, false)
	r.ttft, r.e2e, r.queueWait = nil, nil, nil
	if r.first >= 0 && r.last > r.first {
		r.MakespanS = (r.last - r.first).Seconds()
		r.ThroughputTokS = float64(r.OutputTokens) / r.MakespanS
	}
	total, mx, mn := 0, 0, -1
	for _, d := range r.Dispatched {
		total += d
		mx = max(mx, d)
		if mn < 0 || d < mn {
			mn = d
		}
	}
	r.LoadShare = make([]float64, len(r.Dispatched))
	for i, d := range r.Dispatched {
		if total > 0 {
			r.LoadShare[i] = float64(d) / float64(total)
		}
	}
	if mx > 0 {
		r.MaxMinLoadRatio = float64(mx) / float64(max(mn, 1))
	}
	if r.AgreementKeys > 0 {
		r.Agreement = float64(r.agreed) / float64(r.AgreementKeys)
	}
	if r.SecondAgreementKeys > 0 {
		r.SecondAgreement = float64(r.secondAgreed) / float64(r.SecondAgreementKeys)
	}
	res := &r.Residency
	res.Precision = ratio(res.OverlapTokens, res.PredictedTokens)
	res.Recall = ratio(res.OverlapTokens, res.TrueTokens)
	res.PrecisionReported = ratio(res.OverlapReported, res.PredictedTokens)
	res.RecallReported = ratio(res.OverlapReported, res.ReportedTokens)
	if judged := res.Hits + res.Misses + res.Partials; judged > 0 {
		res.ModulePrecision = float64(res.Hits) / float64(judged)
	}
	if res.BoundaryN > 0 {
		res.BoundaryMeanTok = res.boundarySum / float64(res.BoundaryN)
		res.BoundaryAbsTok = res.boundaryAbs / float64(res.BoundaryN)
	}
	if res.finalIndexN > 0 {
		res.MeanIndexCap = float64(res.finalIndexCap) / float64(res.finalIndexN)
	}
}

// ratio is a/b, or 1 when b is 0 (nothing claimed, nothing wrong).
func ratio(a, b int64) float64 {
	if b == 0 {
		return 1
	}
	return float64(a) / float64(b)
}

// dist sorts xs and summarises it.
func dist(xs []float64, quantiles bool) Dist {
	d := Dist{N: len(xs)}
	if len(xs) == 0 {
		return d
	}
	sortFloat(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	d.Mean = sum / float64(len(xs))
	d.P50, d.P90, d.P99 = Percentile(xs, 50), Percentile(xs, 90), Percentile(xs, 99)
	d.Max = xs[len(xs)-1]
	if quantiles {
		d.Quantiles = make([]float64, 101)
		for q := range d.Quantiles {
			d.Quantiles[q] = Percentile(xs, float64(q))
		}
	}
	return d
}

// Percentile returns the p-th percentile of sorted xs, interpolating
// linearly between closest ranks.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	pos := p / 100 * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(sorted)-1)
	fr := pos - float64(lo)
	return sorted[lo]*(1-fr) + sorted[hi]*fr
}

// RuleStat is what the engines had cached, at the decision, of the
// prompts one rule placed: where the rule sent them (Sent), on the engine
// that had the most (Best), and on their home (Home: the highest
// rendezvous rank of policies.HomeKey), in engine tokens of PromptTokens.
// Sent against Best is what the rule left on the table; Home against
// Sent what a router that knew nothing, sending every prompt home, would
// have found.
type RuleStat struct {
	Requests     int   `json:"requests"`
	PromptTokens int64 `json:"prompt_tokens"`
	SentTokens   int64 `json:"sent_tokens"`
	BestTokens   int64 `json:"best_tokens"`
	HomeTokens   int64 `json:"home_tokens"`
}

func (r RuleStat) add(f *flight, prompt int) RuleStat {
	return r.Merge(RuleStat{Requests: 1, PromptTokens: int64(prompt), SentTokens: int64(f.trueTok),
		BestTokens: int64(f.bestTok), HomeTokens: int64(f.homeTok)})
}

// Merge adds o's counts to r's.
func (r RuleStat) Merge(o RuleStat) RuleStat {
	r.Requests += o.Requests
	r.PromptTokens += o.PromptTokens
	r.SentTokens += o.SentTokens
	r.BestTokens += o.BestTokens
	r.HomeTokens += o.HomeTokens
	return r
}
