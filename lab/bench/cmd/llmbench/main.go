// Command llmbench measures what llmroute costs on the request path, side
// by side in one run on loopback: a fast fake upstream reached directly,
// through stock Caddy (reverse_proxy, lb_policy round_robin), through
// llmroute with each strategy, and through HAProxy (balance hash req.body)
// when it is installed. For 4 KiB and 64 KiB prompts, streamed and not, it
// reports requests/s, the proxy's CPU seconds per 1,000 requests, time to
// first byte at a fixed rate, and peak RSS; then it holds 2,000 slow SSE
// streams through stock Caddy and through llmroute and compares memory per
// stream and checks that every reservation was released.
//
// Run from the repository root:
//
//	lab/bench/run.sh            # full run, about 8 minutes on 2 cores
//	lab/bench/run.sh -quick     # smoke run, about 2 minutes
//	go -C lab run ./bench/cmd/llmbench -h
//
// Results go to lab/bench/results.json (lab/bench/results-quick.json for
// -quick) and a Markdown table to lab/bench/results.md.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/procstat"
)

var tasksetPath string

type benchEnv struct {
	root, workdir  string
	caddyBin       string
	haproxyBin     string
	haproxyVersion string
	haproxyBalance string
	proxyCPUs      []int
	clientCPUs     []int
	upstreams      []string
	upstream       *child
	adminAddrs     map[string]string
	listenAddrs    map[string]string
	altBins        map[string]string // target name -> caddy binary, for <target>@<binary>
}

type options struct {
	quick        bool
	rounds       int
	warm         time.Duration
	dur          time.Duration
	latDur       time.Duration
	slices       int
	rate         int
	conc         int
	sizes        []int
	modes        []bool
	endpoints    []string
	targets      []string
	nUpstreams   int
	streams      int
	streamIv     time.Duration
	hold         time.Duration
	streamPrompt int
	ramp         time.Duration
	maxInFlight  int
	skipConc     bool
	skipMatrix   bool
	profileDir   string
	profileSecs  int
	profileSize  int
	// profileTargets are the targets -profile loads, in order.
	profileTargets []string
	out            string
	md             string
	pin            bool
	build          bool
	caddyBin       string
	keep           bool
}

const defaultTargets = "direct,caddy,llm_round_robin,llm_prefix_affinity,llm_least_load,llm_prefix_load,haproxy"

func main() {
	role := flag.String("role", "bench", "internal: bench or upstream")
	nUp := flag.Int("upstreams", 4, "number of fake upstream replicas (ports)")
	quick := flag.Bool("quick", false, "smoke run (~2 min): 1 round, short phases, 500 streams held 2 s")
	rounds := flag.Int("rounds", 0, "rounds of the whole matrix; medians over rounds (default 3, quick 1)")
	dur := flag.Duration("duration", 0, "throughput phase per target and workload, cut into -slices (default 2.5s, quick 1s)")
	latDur := flag.Duration("latency-duration", 0, "fixed-rate latency phase per workload, shared by all targets (default 8s, quick 3s)")
	rate := flag.Int("rate", 100, "requests/s per target in the shared fixed-rate latency phase")
	slices := flag.Int("slices", 0, "throughput phase slices per target, alternating between targets (default 5, quick 2)")
	conc := flag.Int("concurrency", 32, "workers of the throughput phase")
	sizes := flag.String("sizes", "4096,65536,524288", "prompt sizes in bytes")
	modes := flag.String("modes", "json,sse", "answer modes: json (non-streaming), sse (streaming)")
	flag.StringVar(&promptShape, "prompts", "plain", "prompt shape: plain (a system prompt and a user message of words), agent (a coding agent's chat: tool calls and tool messages carrying source code, escapes all through) or agent-tools (internal/agentbody: the same with a long system prompt and 40 tools, as chat or Anthropic messages)")
	endpoints := flag.String("endpoints", "chat", "endpoints of the matrix: chat (/v1/chat/completions), messages (/v1/messages, -prompts agent-tools only)")
	targets := flag.String("targets", defaultTargets, "targets, in order; llm_<strategy>_nousage: request_usage off; llm_<strategy>_lean: request_usage and index_answers off; <target>@<caddy binary>: the target run by another build, side by side")
	streams := flag.Int("streams", 0, "concurrency test: streams held at once (default 2000, quick 500)")
	streamIv := flag.Duration("stream-interval", 500*time.Millisecond, "concurrency test: time between chunks")
	hold := flag.Duration("hold", 0, "concurrency test: how long all streams are held open once open (default 8s, quick 2s)")
	streamPrompt := flag.Int("stream-prompt", 4096, "concurrency test: prompt bytes per stream")
	maxInFlight := flag.Int("max-in-flight", 4096, "llmroute max_in_flight per replica")
	skipConc := flag.Bool("skip-concurrency", false, "skip the concurrency test")
	skipMatrix := flag.Bool("skip-matrix", false, "skip the throughput/latency matrix")
	profileDir := flag.String("profile", "", "after the run, profile caddy and llm_prefix_load under load (-profile-size prompts) via /debug/pprof and write profiles and pprof -top output here")
	profileSize := flag.Int("profile-size", 4096, "prompt size in bytes of the -profile load")
	profileTargets := flag.String("profile-targets", "caddy,llm_prefix_load", "targets -profile loads, in order (any matrix target but direct and haproxy, e.g. llm_prefix_load_nousage)")
	profileSecs := flag.Int("profile-seconds", 10, "seconds per CPU profile")
	out := flag.String("out", "", "results JSON (default bench/results.json, quick bench/results-quick.json; with -skip-matrix none)")
	md := flag.String("md", "", "results Markdown table (default: -out's, .md for .json)")
	pin := flag.Bool("pin", true, "pin the proxy to the last half of the CPUs and the load generator + upstream to the rest (taskset)")
	build := flag.Bool("build", true, "build bench/caddy-bench from ./cmd/caddy first")
	keep := flag.Bool("keep", false, "keep the work directory (configs and proxy logs) and print its path")
	flag.StringVar(&caddyLogLevel, "caddy-log-level", "WARN", "Caddy's log level (DEBUG shows every upstream attempt; costs CPU)")
	caddyBin := flag.String("caddy", "", "use this caddy binary (with llmroute) instead of building bench/caddy-bench")
	flag.Parse()

	if *role == "upstream" {
		if err := runUpstream(*nUp); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}

	o := options{quick: *quick, rounds: *rounds, slices: *slices, dur: *dur, latDur: *latDur, rate: *rate, conc: *conc,
		nUpstreams: *nUp, streams: *streams, streamIv: *streamIv, hold: *hold, streamPrompt: *streamPrompt, maxInFlight: *maxInFlight,
		skipConc: *skipConc, skipMatrix: *skipMatrix, profileDir: *profileDir, profileSecs: *profileSecs, profileSize: *profileSize, profileTargets: splitList(*profileTargets),
		out: *out, md: *md, pin: *pin, build: *build && *caddyBin == "", caddyBin: *caddyBin, keep: *keep}
	o.warm = 400 * time.Millisecond
	def := func(v *int, full, q int) {
		if *v == 0 {
			*v = full
			if o.quick {
				*v = q
			}
		}
	}
	defd := func(v *time.Duration, full, q time.Duration) {
		if *v == 0 {
			*v = full
			if o.quick {
				*v = q
			}
		}
	}
	def(&o.rounds, 3, 1)
	def(&o.slices, 5, 2)
	defd(&o.dur, 2500*time.Millisecond, time.Second)
	defd(&o.latDur, 8*time.Second, 3*time.Second)
	def(&o.streams, 2000, 500)
	defd(&o.hold, 8*time.Second, 2*time.Second)
	o.ramp = 3 * time.Second
	if o.quick {
		o.warm = 200 * time.Millisecond
		o.ramp = time.Second
	}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 256 {
			fatalf("bad -sizes %q", *sizes)
		}
		o.sizes = append(o.sizes, n)
	}
	for _, m := range strings.Split(*modes, ",") {
		switch strings.TrimSpace(m) {
		case "json":
			o.modes = append(o.modes, false)
		case "sse":
			o.modes = append(o.modes, true)
		default:
			fatalf("bad -modes %q", *modes)
		}
	}
	o.endpoints = splitList(*endpoints)
	for _, e := range o.endpoints {
		if endpointPaths[e] == "" || e == "messages" && promptShape != "agent-tools" {
			fatalf("bad -endpoints %q: chat, or messages with -prompts agent-tools", *endpoints)
		}
	}
	switch promptShape {
	case "plain", "agent", "agent-tools":
	default:
		fatalf("bad -prompts %q", promptShape)
	}
	o.targets = splitList(*targets)
	for _, t := range o.profileTargets {
		if t == "direct" || t == "haproxy" || !(t == "caddy" || isLLM(t)) {
			fatalf("bad -profile-targets %q: caddy or llm_* targets only", *profileTargets)
		}
	}
	if err := run(o); err != nil {
		fatalf("%v", err)
	}
}

// splitList splits a comma-separated flag, leaving out empty items.
func splitList(v string) []string {
	var out []string
	for _, t := range strings.Split(v, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "llmbench: "+format+"\n", args...)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%s] "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// raiseNoFile lifts RLIMIT_NOFILE as far as allowed; children inherit it.
func raiseNoFile() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	want := max(lim.Max, 65536)
	for _, v := range []uint64{want, lim.Max} {
		nl := syscall.Rlimit{Cur: v, Max: max(v, lim.Max)}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl) == nil {
			return v
		}
	}
	return lim.Cur
}

// recordPaths returns where the run writes its record: -out and -md, else
// the recorded run's files under lab/bench. A run that skips the matrix
// writes no record unless -out names one (out is then ""): it would
// otherwise replace the recorded matrix with an empty one.
func recordPaths(root string, o options) (out, md string) {
	out, md = o.out, o.md
	if out == "" {
		if o.skipMatrix {
			return "", ""
		}
		out = filepath.Join(root, "lab", "bench", "results.json")
		if o.quick {
			out = filepath.Join(root, "lab", "bench", "results-quick.json")
		}
	}
	if md == "" {
		md = strings.TrimSuffix(out, ".json") + ".md"
	}
	return out, md
}

func run(o options) error {
	started := time.Now()
	root, err := caddyproc.RepoRoot()
	if err != nil {
		return err
	}
	o.out, o.md = recordPaths(root, o)
	nofile := raiseNoFile()
	env := &benchEnv{root: root, adminAddrs: map[string]string{}, listenAddrs: map[string]string{}, altBins: map[string]string{}}
	// <target>@<path>: the same target run by another caddy binary (a
	// patched build), shown as <target>@<file name>.
	for i, t := range o.targets {
		base, bin, ok := strings.Cut(t, "@")
		if !ok {
			continue
		}
		abs, err := filepath.Abs(bin)
		if err != nil {
			return err
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("target %s: %v", t, err)
		}
		o.targets[i] = base + "@" + filepath.Base(abs)
		env.altBins[o.targets[i]] = abs
	}
	env.workdir, err = os.MkdirTemp("", "llmbench-")
	if err != nil {
		return err
	}
	if o.keep {
		logf("work directory (kept): %s", env.workdir)
	} else {
		defer os.RemoveAll(env.workdir)
	}

	// The caddy binary (built before pinning, on every CPU).
	env.caddyBin = filepath.Join(root, "lab", "bench", "caddy-bench")
	if o.caddyBin != "" {
		if env.caddyBin, err = filepath.Abs(o.caddyBin); err != nil {
			return err
		}
	}
	if o.build {
		logf("building %s (go build ./cmd/caddy)", env.caddyBin)
		cmd := exec.Command("go", "build", "-o", env.caddyBin, "./cmd/caddy")
		cmd.Dir = root
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("building caddy: %v", err)
		}
	}
	if _, err := os.Stat(env.caddyBin); err != nil {
		return fmt.Errorf("no caddy binary at %s (drop -build=false)", env.caddyBin)
	}
	// CPU layout.
	ncpu := runtime.NumCPU()
	tasksetPath, _ = exec.LookPath("taskset")
	if o.pin && ncpu >= 2 && tasksetPath != "" {
		half := ncpu / 2
		for c := range ncpu {
			if c < ncpu-half {
				env.clientCPUs = append(env.clientCPUs, c)
			} else {
				env.proxyCPUs = append(env.proxyCPUs, c)
			}
		}
		if err := pinSelf(env.clientCPUs); err != nil {
			logf("pinning the load generator failed (%v): running unpinned", err)
			env.clientCPUs, env.proxyCPUs = nil, nil
		} else {
			runtime.GOMAXPROCS(len(env.clientCPUs))
		}
	}
	if env.proxyCPUs == nil {
		tasksetPath = ""
	}
	logf("cpus=%d pin proxy=%v client+upstream=%v GOMAXPROCS proxy=%d client=%d nofile=%d loadavg=%s",
		ncpu, env.proxyCPUs, env.clientCPUs, max(len(env.proxyCPUs), 0), runtime.GOMAXPROCS(0), nofile, loadAvg())

	caddyVersion := firstLine(exec.Command(env.caddyBin, "version").Output())

	// HAProxy, when installed and usable.
	var notes []string
	wantHAProxy := false
	for _, t := range o.targets {
		wantHAProxy = wantHAProxy || t == "haproxy"
	}
	if wantHAProxy {
		env.haproxyBin, _ = exec.LookPath("haproxy")
		if env.haproxyBin == "" {
			notes = append(notes, "haproxy is not installed: skipped (bench/run.sh installs the Debian package when it can)")
		} else {
			env.haproxyVersion = firstLine(exec.Command(env.haproxyBin, "-v").Output())
			env.haproxyBalance = pickHAProxyBalance(env)
			if env.haproxyBalance == "" {
				notes = append(notes, "haproxy rejected every balance we tried: skipped")
				env.haproxyBin = ""
			} else if env.haproxyBalance != "hash req.body" {
				notes = append(notes, "haproxy "+env.haproxyVersion+" has no `balance hash req.body`: used `balance "+env.haproxyBalance+"`")
			}
		}
	}
	var targets []string
	for _, t := range o.targets {
		if t == "haproxy" && env.haproxyBin == "" {
			continue
		}
		targets = append(targets, t)
	}

	// The fake upstream.
	env.upstream, env.upstreams, err = startUpstreamChild(env.workdir, o.nUpstreams, env.clientCPUs)
	if err != nil {
		return err
	}
	defer env.upstream.stop()
	logf("fake upstream pid %d on %s", env.upstream.pid, strings.Join(env.upstreams, " "))

	rep := &report{
		GeneratedAt: started.UTC().Format(time.RFC3339),
		Notes:       notes,
		Env: envInfo{
			CPUs: ncpu, ProxyCPUs: env.proxyCPUs, ClientCPUs: env.clientCPUs, GOMAXPROCSProxy: len(env.proxyCPUs),
			GOMAXPROCSClient: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), Caddy: caddyVersion,
			HAProxy: env.haproxyVersion, HAProxyBalance: env.haproxyBalance, Kernel: kernel(), GitRev: gitRev(root), LoadAvgStart: loadAvg(),
			NoFile: nofile,
		},
		Config: runConfig{
			Quick: o.quick, Rounds: o.rounds, WarmupS: o.warm.Seconds(), ThroughputS: o.dur.Seconds(), LatencyS: o.latDur.Seconds(),
			LatencyRate: o.rate, Slices: o.slices, Concurrency: o.conc, Upstreams: o.nUpstreams, Targets: targets, Sizes: o.sizes,
			MaxInFlight: o.maxInFlight, Streams: o.streams, StreamInterval: o.streamIv.String(), StreamHold: o.hold.String(), StreamPrompt: o.streamPrompt,
			Tenants: tenants, BodiesPerShape: bodiesPerShape, StreamChunksFast: streamChunks, Prompts: promptShape, Endpoints: o.endpoints,
			Percentiles: percentileMethod,
		},
	}

	if !o.skipMatrix {
		if err := runMatrix(env, o, targets, rep); err != nil {
			return err
		}
	}
	if !o.skipConc {
		if err := runConcurrency(env, o, rep); err != nil {
			return err
		}
	}
	rep.Env.LoadAvgEnd = loadAvg()
	rep.WallSeconds = time.Since(started).Seconds()
	rep.finish()
	done := "left the record as it is (a run without the matrix writes one only where -out says)"
	if o.out != "" {
		if err := rep.write(o.out, o.md); err != nil {
			return err
		}
		done = fmt.Sprintf("wrote %s and %s", o.out, o.md)
	}
	rep.print(os.Stdout)
	logf("%s in %.0fs", done, rep.WallSeconds)
	if o.profileDir != "" {
		if err := runProfiles(env, o); err != nil {
			return err
		}
	}
	return nil
}

func firstLine(b []byte, err error) string {
	if err != nil {
		return ""
	}
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// gitRev describes the tree measured: commit, and "-dirty" with local changes.
func gitRev(root string) string {
	cmd := exec.Command("git", "describe", "--always", "--dirty")
	cmd.Dir = root
	return firstLine(cmd.Output())
}

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return strings.TrimSpace(string(b))
}

// pickHAProxyBalance returns the first balance algorithm haproxy -c accepts.
func pickHAProxyBalance(env *benchEnv) string {
	dir := filepath.Join(env.workdir, "haproxy-check")
	_ = os.MkdirAll(dir, 0o755)
	for _, b := range []string{"hash req.body", "uri whole", "roundrobin"} {
		cfg := filepath.Join(dir, "check.cfg")
		_ = os.WriteFile(cfg, []byte(haproxyConfig("127.0.0.1:1", []string{"127.0.0.1:2"}, 1, b)), 0o644)
		if exec.Command(env.haproxyBin, "-c", "-q", "-f", cfg).Run() == nil {
			return b
		}
	}
	return ""
}

// runMatrix measures every target on every workload, rounds times. Noise
// on a shared machine comes and goes within seconds, so targets are never
// measured one after the other in long blocks: the throughput phase is cut
// into slices that alternate between targets (the order rotates every
// slice), and the latency phase sends to every target in turn from one
// fixed-rate stream. Every target thus sees the same noise.
func runMatrix(env *benchEnv, o options, targets []string, rep *report) error {
	var live []*target
	defer func() {
		for _, t := range live {
			t.proc.stop()
		}
	}()
	byName := map[string]*target{}
	for _, name := range targets {
		t, err := startTarget(env, name, o.maxInFlight)
		if err != nil {
			return fmt.Errorf("starting %s: %v", name, err)
		}
		if t.proc != nil {
			live = append(live, t)
		}
		byName[name] = t
		logf("target %-22s %s pid %d", name, t.url, t.pid())
	}
	var wls []workload
	for _, e := range o.endpoints {
		for _, s := range o.sizes {
			for _, m := range o.modes {
				wls = append(wls, makeWorkload(s, m, e))
			}
		}
	}
	// First contact: a short run per target and workload, unmeasured.
	for _, name := range targets {
		for _, w := range wls {
			cl := newClient(2*o.conc + 64)
			r := closedLoop(cl, byName[name].url, w, 8, 0, 200)
			cl.CloseIdleConnections()
			if r.errs > 0 {
				return fmt.Errorf("%s %s: %d errors in warm-up, first: %s", name, w.label(), r.errs, r.firstErr)
			}
		}
	}
	step := 0
	total := o.rounds * len(wls)
	for round := range o.rounds {
		for wi, w := range wls {
			order := make([]*target, len(targets))
			for k := range targets {
				order[k] = byName[targets[(k+round+wi)%len(targets)]]
				if p := order[k].proc; p != nil && !p.alive() {
					return fmt.Errorf("%s died: %s", order[k].name, p.logTail())
				}
			}
			crs := measureWorkload(env, o, order, w)
			step++
			for k, t := range order {
				cr := crs[k]
				cr.Round = round + 1
				rep.addRound(t.name, w, cr)
				logf("%2d/%d round %d %-9s %-20s %7.0f req/s  cpu %6.3f s/1k  ttfb p50 %6.3f p99 %7.3f ms  rss %6.1f MiB  allocs %5.1f/req  foreign %3.0f%%%s",
					step, total, round+1, w.label(), t.name, cr.RPS, cr.CPUPer1k, cr.TTFBP50, cr.TTFBP99, cr.PeakRSSMiB, cr.AllocsPerReq, 100*cr.ForeignCPU, errNote(cr))
			}
		}
	}
	// Every reservation released after the matrix.
	for _, name := range targets {
		t := byName[name]
		if isLLM(name) {
			inf, q, err := waitReleased(t.admin, 5*time.Second)
			rep.MatrixReleased = append(rep.MatrixReleased, releaseCheck{Target: name, TotalInFlight: inf, Queued: q, OK: err == nil && inf == 0 && q == 0})
		}
	}
	return nil
}

func errNote(cr cellRound) string {
	if cr.Errors == 0 {
		return ""
	}
	return fmt.Sprintf("  ERRORS %d (%s)", cr.Errors, cr.FirstErr)
}

// latencyRate is the per-target rate of the latency phase: -rate up to
// 16 KiB prompts, then fewer requests per second so that the bytes per
// second stay those of a 16 KiB prompt (the shared phase must not load
// the machine, or it measures queueing instead of the proxy).
func latencyRate(rate, size int) int {
	if size <= 16<<10 {
		return rate
	}
	return max(1, rate*(16<<10)/size)
}

// allocCounts is the Go runtime's cumulative heap allocation counters of
// a Caddy process, as its admin API's /debug/vars (expvar) reports them.
type allocCounts struct {
	Mallocs    uint64 `json:"Mallocs"`
	TotalAlloc uint64 `json:"TotalAlloc"`
}

// readAllocs reads admin's allocation counters (ok false for a target
// without a Caddy admin API, or on any error). The read itself allocates
// a few hundred objects, nothing beside a slice's requests.
func readAllocs(admin string) (allocCounts, bool) {
	if admin == "" {
		return allocCounts{}, false
	}
	b, err := httpGet("http://"+admin+"/debug/vars", 5*time.Second)
	if err != nil {
		return allocCounts{}, false
	}
	var v struct {
		MemStats *allocCounts `json:"memstats"`
	}
	if json.Unmarshal(b, &v) != nil || v.MemStats == nil || v.MemStats.Mallocs == 0 {
		return allocCounts{}, false
	}
	return *v.MemStats, true
}

// cpuSnap is the CPU counters around one slice.
type cpuSnap struct{ proxy, self, upstream, busy float64 }

func snapCPU(env *benchEnv, pid int) cpuSnap {
	var s cpuSnap
	if pid > 0 {
		s.proxy, _ = procCPU(pid)
	}
	s.self, _ = procCPU(os.Getpid())
	s.upstream, _ = procCPU(env.upstream.pid)
	s.busy, _ = systemCPU()
	return s
}

// measureWorkload measures every target of order on one workload: a
// warm-up each, o.slices throughput slices each (closed loop, o.conc
// workers, alternating between targets), then one fixed-rate latency phase
// shared by all targets.
func measureWorkload(env *benchEnv, o options, order []*target, w workload) []cellRound {
	k := len(order)
	crs := make([]cellRound, k)
	clients := make([]*http.Client, k)
	hwmOK := make([]bool, k)
	for i, t := range order {
		clients[i] = newClient(2*o.conc + 64)
		defer clients[i].CloseIdleConnections()
		if t.pid() > 0 {
			hwmOK[i] = resetHWM(t.pid())
		}
		closedLoop(clients[i], t.url, w, o.conc, o.warm, 0)
	}
	type acc struct {
		cpu, ours, busy, wall float64
		mallocs, allocBytes   float64
		allocOK               bool
		ok, errs              int
		firstErr              string
		ttfb                  []time.Duration
		slices                []float64 // CPU microseconds per request, per slice
	}
	accs := make([]acc, k)
	slice := o.dur / time.Duration(o.slices)
	for s := range o.slices {
		for j := range k {
			i := (j + s) % k
			t := order[i]
			a := &accs[i]
			m0, ok0 := readAllocs(t.admin)
			c0 := snapCPU(env, t.pid())
			tp := closedLoop(clients[i], t.url, w, o.conc, slice, 0)
			c1 := snapCPU(env, t.pid())
			m1, ok1 := readAllocs(t.admin)
			if ok0 && ok1 {
				a.allocOK = true
				a.mallocs += float64(m1.Mallocs - m0.Mallocs)
				a.allocBytes += float64(m1.TotalAlloc - m0.TotalAlloc)
			}
			a.cpu += c1.proxy - c0.proxy
			if t.pid() > 0 && tp.ok > 0 {
				a.slices = append(a.slices, (c1.proxy-c0.proxy)/float64(tp.ok)*1e6)
			}
			a.ours += (c1.proxy - c0.proxy) + (c1.self - c0.self) + (c1.upstream - c0.upstream)
			a.busy += c1.busy - c0.busy
			a.wall += tp.wall.Seconds()
			a.ok += tp.ok
			a.errs += tp.errs
			if a.firstErr == "" {
				a.firstErr = tp.firstErr
			}
			a.ttfb = append(a.ttfb, tp.ttfb...)
		}
	}
	urls := make([]string, k)
	for i, t := range order {
		urls[i] = t.url
	}
	// The same requests per second reach every target in the latency
	// phase, so CPU per request there compares proxies at equal load
	// (below saturation, where per-request wake-ups are not amortized).
	fixed0 := make([]float64, k)
	for i, t := range order {
		if t.pid() > 0 {
			fixed0[i], _ = procCPU(t.pid())
		}
	}
	lats := openLoopMulti(clients, urls, w, latencyRate(o.rate, w.size), o.latDur, 256)
	ncpu := float64(runtime.NumCPU())
	for i, t := range order {
		a := &accs[i]
		if t.pid() > 0 {
			fixed1, _ := procCPU(t.pid())
			crs[i].FixedCPUSeconds = fixed1 - fixed0[i]
			crs[i].FixedRequests = lats[i].ok
		}
		cr := &crs[i]
		sat := phaseResult{ttfb: a.ttfb}
		sortDurations(sat.ttfb)
		cr.Requests = a.ok
		if a.wall > 0 {
			cr.RPS = float64(a.ok) / a.wall
			cr.ForeignCPU = max(0, a.busy-a.ours) / (a.wall * ncpu)
		}
		if a.allocOK && a.ok > 0 {
			cr.AllocsPerReq = a.mallocs / float64(a.ok)
			cr.AllocKiBPerReq = a.allocBytes / float64(a.ok) / 1024
		}
		if t.pid() > 0 && a.ok > 0 {
			cr.SliceCPUUs = a.slices
			cr.CPUPer1k = a.cpu / float64(a.ok) * 1000
			cr.ProxyCPUShare = a.cpu / a.wall
		}
		cr.SatP50, cr.SatP99 = sat.pct(0.50), sat.pct(0.99)
		lat := lats[i]
		cr.TTFBP50, cr.TTFBP99 = lat.pct(0.50), lat.pct(0.99)
		cr.TTFBSamplesMs = lat.ttfbMs()
		cr.LatencySamples = len(lat.ttfb)
		cr.LatencySkipped = lat.skipped
		cr.Errors = a.errs + lat.errs
		cr.FirstErr = a.firstErr
		if cr.FirstErr == "" {
			cr.FirstErr = lat.firstErr
		}
		if t.pid() > 0 {
			if hwm, err := procstat.StatusKB(t.pid(), "VmHWM"); err == nil {
				cr.PeakRSSMiB = float64(hwm) / 1024
			}
			cr.HWMReset = hwmOK[i]
		}
	}
	return crs
}

// runConcurrency holds o.streams slow streams through a fresh stock Caddy
// and a fresh llmroute (prefix_load), one after the other.
func runConcurrency(env *benchEnv, o options, rep *report) error {
	for _, name := range []string{"caddy", "llm_prefix_load"} {
		cname := "conc_" + name
		env.adminAddrs[cname], env.listenAddrs[cname] = freeAddr(), freeAddr()
		var cf string
		if name == "caddy" {
			cf = stockCaddyfile(env.adminAddrs[cname], env.listenAddrs[cname], env.upstreams)
		} else {
			cf = llmCaddyfile(env.adminAddrs[cname], env.listenAddrs[cname], env.upstreams, "prefix_load", o.maxInFlight, true, true)
		}
		t, err := startCaddyTarget(env, cname, cf)
		if err != nil {
			return err
		}
		t.name = name
		logf("concurrency: %d streams, a chunk every %v, held %v once all are open, through %s (pid %d)", o.streams, o.streamIv, o.hold, name, t.pid())
		r := concurrencyTest(env, t, o.streams, o.streamPrompt, o.streamIv, o.hold, o.ramp)
		t.proc.stop()
		rel := ""
		if r.Released != nil {
			rel = fmt.Sprintf("  released=%v (in_flight %d, queued %d)", *r.Released, *r.InFlightAfter, *r.QueuedAfter)
		}
		logf("concurrency %-16s ok %d/%d  %d open at once after %.2fs  rss %.1f -> %.1f MiB  %.1f KiB/stream (peak %.1f, live heap+stacks %.1f)  cpu %.2fs%s%s",
			name, r.OK, r.Streams, r.OpenAtOnce, r.AllOpenSeconds, r.BaselineRSSMiB, r.PlateauRSSMiB, r.KiBPerStream, r.PeakKiBPerStr, r.LiveKiBPerStream, r.CPUSeconds, rel,
			map[bool]string{true: "  first error: " + r.FirstErr, false: ""}[r.FirstErr != ""])
		rep.Concurrency = append(rep.Concurrency, r)
		time.Sleep(500 * time.Millisecond)
	}
	return nil
}
