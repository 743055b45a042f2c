package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// runProfiles loads each of o.profileTargets (stock Caddy and
// llm_prefix_load by default) with requests of
// o.profileSize bytes (4 KiB by default) to each of the matrix's
// endpoints, streamed and not, and fetches
// from Caddy's admin endpoint a CPU profile and an allocation profile (a
// delta over the same seconds) of each. It writes the profiles and `go
// tool pprof -top` of each to dir.
func runProfiles(env *benchEnv, o options) error {
	if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
		return err
	}
	secs := o.profileSecs
	for _, name := range o.profileTargets {
		pname := "prof_" + name
		t, err := startTargetAs(env, pname, name, o.maxInFlight)
		if err != nil {
			return err
		}
		for _, prof := range profileRuns(o.endpoints) {
			stream := prof.stream
			w := makeWorkload(o.profileSize, stream, prof.endpoint)
			base := filepath.Join(o.profileDir, fmt.Sprintf("%s_%dk_%s%s", name, o.profileSize>>10, map[bool]string{false: "json", true: "sse"}[stream], prof.suffix))
			cl := newClient(2*o.conc + 64)
			closedLoop(cl, t.url, w, o.conc, time.Second, 0)
			var wg sync.WaitGroup
			var cpuErr, allocErr error
			var res phaseResult
			wg.Add(3)
			go func() {
				defer wg.Done()
				res = closedLoop(cl, t.url, w, o.conc, time.Duration(secs+1)*time.Second, 0)
			}()
			go func() {
				defer wg.Done()
				time.Sleep(300 * time.Millisecond)
				cpuErr = fetch("http://"+t.admin+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), base+".cpu.pb.gz", secs)
			}()
			go func() {
				defer wg.Done()
				time.Sleep(300 * time.Millisecond)
				allocErr = fetch("http://"+t.admin+"/debug/pprof/allocs?seconds="+strconv.Itoa(secs), base+".allocs.pb.gz", secs)
			}()
			wg.Wait()
			cl.CloseIdleConnections()
			if cpuErr != nil || allocErr != nil {
				t.proc.stop()
				return fmt.Errorf("profiling %s: cpu: %v, allocs: %v", name, cpuErr, allocErr)
			}
			logf("profiled %s %s: %d requests (%.0f req/s) -> %s.{cpu,allocs}.pb.gz", name, w.label(), res.ok, res.rps(), base)
			top(base+".cpu.pb.gz", base+".cpu.top.txt", "-nodecount=45")
			top(base+".cpu.pb.gz", base+".cpu.cum.txt", "-nodecount=60", "-cum")
			top(base+".allocs.pb.gz", base+".alloc_space.top.txt", "-nodecount=40", "-sample_index=alloc_space")
			top(base+".allocs.pb.gz", base+".alloc_objects.top.txt", "-nodecount=40", "-sample_index=alloc_objects")
		}
		t.proc.stop()
	}
	return nil
}

// profileRun is one load -profile puts on a target.
type profileRun struct {
	endpoint string
	stream   bool
	suffix   string // of the file names: "" for chat, "_messages"
}

// profileRuns are the loads for the matrix's endpoints: json and sse of
// each, chat's files named as they always were.
func profileRuns(endpoints []string) []profileRun {
	var runs []profileRun
	for _, e := range endpoints {
		suffix := ""
		if e != "chat" {
			suffix = "_" + e
		}
		runs = append(runs, profileRun{e, false, suffix}, profileRun{e, true, suffix})
	}
	return runs
}

func fetch(url, path string, secs int) error {
	b, err := httpGet(url, time.Duration(secs+30)*time.Second)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// top writes `go tool pprof -top` of a profile (best effort).
func top(profile, out string, args ...string) {
	argv := append([]string{"tool", "pprof", "-top"}, args...)
	argv = append(argv, profile)
	b, err := exec.Command("go", argv...).CombinedOutput()
	if err != nil {
		b = append(b, []byte("\n"+err.Error())...)
	}
	_ = os.WriteFile(out, b, 0o644)
}
