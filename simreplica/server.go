package simreplica

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Paths the server answers.
const (
	pathChat          = "/v1/chat/completions"
	pathCompletions   = "/v1/completions"
	pathMessages      = "/v1/messages"
	pathCountTokens   = "/v1/messages/count_tokens"
	pathResponses     = "/v1/responses"
	pathModels        = "/v1/models"
	pathHealth        = "/health"
	pathMetrics       = "/metrics"
	pathSimStats      = "/sim/stats"
	pathSimStatsReset = "/sim/stats/reset"
	pathSimRestart    = "/sim/restart"
	pathSimFault      = "/sim/fault"
	pathSimCached     = "/sim/cached"
)

// Server is a simulated OpenAI-compatible replica: an http.Handler over an
// engine.Engine driven in real time by one goroutine. Create it with New,
// serve it with Serve / ListenAndServe or mount it in any http.Server
// (httptest included), and stop it with Close.
type Server struct {
	cfg     Config
	drv     *driver
	nextID  atomic.Uint64
	created int64 // unix seconds, for /v1/models

	// responses is the state /v1/responses keeps here; its ids are
	// "resp_" + idPrefix (random per server) + nextResp.
	responses *responseStore
	idPrefix  string
	nextResp  atomic.Uint64

	faultMu    sync.Mutex
	fault      Fault
	faultTimer *time.Timer

	downUntil atomic.Int64 // unix nanoseconds; down while now < downUntil

	counts   *requestCounters
	reqTotal *prometheus.CounterVec
	metrics  http.Handler

	closing   chan struct{}
	closeOnce sync.Once

	srvMu     sync.Mutex
	closed    bool
	listeners []*switchListener
	servers   []*http.Server
}

// New builds a server and starts its engine driver. It fails on a bad
// engine configuration or global fault spec.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if _, err := ParsePersonality(string(cfg.Personality)); err != nil {
		return nil, err
	}
	eng, err := simengine.New(cfg.Engine)
	if err != nil {
		return nil, err
	}
	f, err := ParseFault(cfg.Fault, cfg.RetryAfter, cfg.Stall)
	if err != nil {
		return nil, err
	}
	cfg.Engine = eng.Config()
	s := &Server{
		cfg:     cfg,
		created: time.Now().Unix(),
		fault:   NoFault,
		counts:  newRequestCounters(),
		closing: make(chan struct{}),

		responses: newResponseStore(maxStored),
		idPrefix:  fmt.Sprintf("%016x", rand.Uint64()),
	}
	reg := prometheus.NewRegistry()
	s.reqTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricRequests,
		Help: "HTTP requests received by the simulated replica, by path.",
	}, []string{"path"})
	reg.MustRegister(s.reqTotal, collectorFor(s))
	s.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	s.drv = newDriver(eng)
	s.setFault(f, cfg.FaultDuration)
	return s, nil
}

// Name returns the replica name.
func (s *Server) Name() string { return s.cfg.Name }

// Config returns the effective configuration (defaults filled in).
func (s *Server) Config() Config { return s.cfg }

// SetFault sets the global fault from a spec (see ParseFault; "" or
// "none" clears it), for d (0: until changed). A global "refuse" closes
// the listeners of Serve until it is cleared.
func (s *Server) SetFault(spec string, d time.Duration) error {
	f, err := ParseFault(spec, s.cfg.RetryAfter, s.cfg.Stall)
	if err != nil {
		return err
	}
	s.setFault(f, d)
	return nil
}

func (s *Server) setFault(f Fault, d time.Duration) {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	if s.faultTimer != nil {
		s.faultTimer.Stop()
		s.faultTimer = nil
	}
	s.fault = f
	if !f.IsZero() {
		s.cfg.Logf("simreplica %s: global fault %q for %v", s.cfg.Name, f.String(), d)
	}
	if d > 0 && !f.IsZero() {
		var t *time.Timer
		t = time.AfterFunc(d, func() {
			s.faultMu.Lock()
			current := s.faultTimer == t
			s.faultMu.Unlock()
			if current {
				s.setFault(NoFault, 0)
			}
		})
		s.faultTimer = t
	}
	s.applyRefuse(f.Refuse)
}

// applyRefuse closes or reopens the Serve listeners.
func (s *Server) applyRefuse(refuse bool) {
	s.srvMu.Lock()
	defer s.srvMu.Unlock()
	for _, l := range s.listeners {
		if refuse {
			l.refuse()
		} else if err := l.listen(); err != nil {
			s.cfg.Logf("simreplica %s: listen again on %s: %v", s.cfg.Name, l.Addr(), err)
		}
	}
}

// currentFault returns the global fault.
func (s *Server) currentFault() Fault {
	s.faultMu.Lock()
	defer s.faultMu.Unlock()
	return s.fault
}

// Restart models a crash and restart of the replica: every in-flight
// request is aborted (streams are cut), the cache and the engine counters
// are wiped, and for down the replica answers 503 to health checks and
// inference requests. It returns the number of requests aborted.
func (s *Server) Restart(down time.Duration) int {
	if down > 0 {
		s.downUntil.Store(time.Now().Add(down).UnixNano())
	}
	n := s.drv.restart()
	s.cfg.Logf("simreplica %s: restart, %d requests aborted, down %v", s.cfg.Name, n, down)
	return n
}

func (s *Server) isDown(now time.Time) bool { return now.UnixNano() < s.downUntil.Load() }

// CachedPrefixTokens returns how many tokens of a prompt would be served
// from the replica's cache now, without changing it (an oracle's view).
func (s *Server) CachedPrefixTokens(tokens []uint32) int { return s.drv.cachedPrefixTokens(tokens) }

// Serve accepts connections on ln (a TCP listener) until Close. Unlike a
// plain http.Server it can stop listening while a global "refuse" fault is
// set, so that clients get connection refused, and listen again on the
// same address afterwards. It returns nil after Close (and
// http.ErrServerClosed, closing ln, if Close came first).
func (s *Server) Serve(ln net.Listener) error {
	sl := newSwitchListener(ln)
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.srvMu.Lock()
	if s.closed {
		s.srvMu.Unlock()
		_ = ln.Close()
		return http.ErrServerClosed
	}
	s.listeners = append(s.listeners, sl)
	s.servers = append(s.servers, hs)
	s.srvMu.Unlock()
	if s.currentFault().Refuse {
		sl.refuse()
	}
	err := hs.Serve(sl)
	if errors.Is(err, http.ErrServerClosed) {
		select {
		case <-s.closing:
			return nil
		default:
		}
	}
	return err
}

// ListenAndServe listens on addr (e.g. "127.0.0.1:9001") and calls Serve.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Close stops the server: listeners and connections of Serve are closed,
// in-flight requests are aborted and the driver goroutine exits. It waits
// for the driver but not for handlers of servers it does not own.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.faultMu.Lock()
		if s.faultTimer != nil {
			s.faultTimer.Stop()
			s.faultTimer = nil
		}
		s.faultMu.Unlock()
		s.srvMu.Lock()
		s.closed = true
		servers := s.servers
		s.srvMu.Unlock()
		for _, hs := range servers {
			_ = hs.Close()
		}
		s.drv.close()
	})
	return nil
}

// ServeHTTP routes a request. Every response carries X-Sim-Replica.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderReplica, s.cfg.Name)
	if id := r.Header.Get("X-Request-Id"); id != "" {
		w.Header().Set("X-Request-Id", id)
	}
	path := r.URL.Path
	s.reqTotal.WithLabelValues(pathLabel(path)).Inc()

	if !strings.HasPrefix(path, "/sim/") && s.currentFault().Refuse {
		s.counts.inc(cntCut)
		closeConn(w)
		return
	}

	switch path {
	case pathChat:
		s.handleGenerate(w, r, apiChat)
	case pathCompletions:
		s.handleGenerate(w, r, apiCompletions)
	case pathMessages:
		s.handleGenerate(w, r, apiMessages)
	case pathCountTokens:
		s.handleCountTokens(w, r)
	case pathResponses:
		s.handleGenerate(w, r, apiResponses)
	case pathModels:
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.handleModels(w)
		}
	case pathHealth:
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.handleHealth(w)
		}
	case pathMetrics:
		if s.cfg.Personality == LlamaCpp && s.cfg.APIKey != "" && !keyed(r, s.cfg.APIKey) {
			// llama.cpp's server keeps /metrics behind --api-key.
			writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
			return
		}
		if allow(w, r, http.MethodGet, http.MethodHead) {
			s.metrics.ServeHTTP(w, r)
		}
	case pathSimStats:
		if allow(w, r, http.MethodGet, http.MethodHead) {
			writeJSON(w, http.StatusOK, s.Stats())
		}
	case pathSimStatsReset:
		if allow(w, r, http.MethodPost) {
			s.counts.reset()
			writeJSON(w, http.StatusOK, s.Stats())
		}
	case pathSimRestart:
		if allow(w, r, http.MethodPost) {
			s.handleRestart(w, r)
		}
	case pathSimFault:
		if allow(w, r, http.MethodGet, http.MethodPost) {
			s.handleFault(w, r)
		}
	case pathSimCached:
		if allow(w, r, http.MethodPost) {
			s.handleCached(w, r)
		}
	default:
		writeError(w, http.StatusNotFound, errInvalidRequest, fmt.Sprintf("no route for %s %s", r.Method, path), "", "not_found")
	}
}

// allow answers 405 (with Allow) unless r's method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeError(w, http.StatusMethodNotAllowed, errInvalidRequest,
		fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path), "", "method_not_allowed")
	return false
}

// closeConn closes the client connection without any response (a reset
// where the platform allows), or aborts the handler when it cannot be
// hijacked.
func closeConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
