package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/testrig/netx"
	"github.com/llmroute/caddy-llmroute/internal/testrig/proc"
	"golang.org/x/sys/unix"
)

// clkTck is USER_HZ, the unit of utime and stime in /proc/<pid>/stat. It is
// 100 on every Linux architecture Go supports outside of exotic kernels.
const clkTck = 100

// procCPU returns the user+system CPU seconds of pid, all threads.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name is in parentheses and may hold spaces: fields
	// start after the last ')'. utime and stime are fields 14 and 15, so
	// 12th and 13th after the state field (index 0 here).
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("bad stat fields")
	}
	return float64(ut+st) / clkTck, nil
}

// resetHWM resets the peak RSS (VmHWM) of pid to its current RSS, so that a
// long-lived proxy's peak can be read per measurement (Linux >= 4.0, needs
// to own the process or be root). It reports whether that worked.
func resetHWM(pid int) bool {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0) == nil
}

// systemCPU returns the busy and total CPU seconds of the whole machine
// from /proc/stat (busy = total - idle - iowait).
func systemCPU() (busy, total float64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	var sum, idle uint64
	for i, s := range f[1:] {
		v, _ := strconv.ParseUint(s, 10, 64)
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		sum += v
		if i == 3 || i == 4 {
			idle += v
		}
	}
	return float64(sum-idle) / clkTck, float64(sum) / clkTck
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// pinSelf restricts every thread of this process to cpus and sets
// GOMAXPROCS to match. Threads created later inherit the mask from the
// thread that creates them, so pinning all current threads (twice, to
// catch one created meanwhile) pins the process.
func pinSelf(cpus []int) error {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	for range 2 {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return err
		}
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil {
				return err
			}
		}
	}
	return nil
}

func cpuList(cpus []int) string {
	s := make([]string, len(cpus))
	for i, c := range cpus {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ",")
}

// child is a process llmbench started and stops.
type child struct {
	name string
	p    *proc.Proc
	pid  int
	// stdin, when set, is closed to ask the child to exit.
	stdin io.WriteCloser
}

// startChild starts argv, pinned to cpus with taskset when cpus is set,
// with GOMAXPROCS=gomaxprocs (0: unset), stderr (and stdout, unless
// stdout is given) to logPath.
func startChild(name string, argv []string, cpus []int, gomaxprocs int, env []string, logPath string, stdout io.Writer) (*child, error) {
	if len(cpus) > 0 && tasksetPath != "" {
		argv = append([]string{tasksetPath, "-c", cpuList(cpus)}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	if gomaxprocs > 0 {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+strconv.Itoa(gomaxprocs))
	}
	cmd.Stdout = stdout
	// Die with llmbench, whatever kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c := &child{name: name}
	if stdout != nil {
		// Only the upstream reads stdin (to notice the parent closing it).
		var err error
		if c.stdin, err = cmd.StdinPipe(); err != nil {
			return nil, err
		}
	}
	p, err := proc.Start(cmd, logPath)
	if err != nil {
		return nil, err
	}
	c.p, c.pid = p, p.Pid()
	return c, nil
}

func (c *child) alive() bool { return !c.p.Exited() }

// stop asks the child to exit (its stdin closed, SIGTERM, then SIGKILL
// after 5 s).
func (c *child) stop() {
	if c == nil || !c.alive() {
		return
	}
	if c.stdin != nil {
		c.stdin.Close()
	}
	c.p.Stop(5 * time.Second)
}

func (c *child) logTail() string { return c.p.LogTail(2000) }

// waitListen waits until addr accepts TCP connections.
func waitListen(ctx context.Context, c *child, addr string) error {
	switch err := netx.WaitTCP(ctx, addr, c.p.Done()); {
	case err == nil:
		return nil
	case errors.Is(err, netx.ErrExited):
		return fmt.Errorf("%s exited: %s", c.name, c.logTail())
	default:
		return fmt.Errorf("%s did not listen on %s: %s", c.name, addr, c.logTail())
	}
}

// freeAddr is netx.FreeAddr for set-up code that cannot go on without one.
func freeAddr() string {
	addr, err := netx.FreeAddr()
	if err != nil {
		panic(err)
	}
	return addr
}

// startUpstreamChild runs this binary with -role=upstream.
func startUpstreamChild(dir string, n int, cpus []int) (*child, []string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	pr, pw := io.Pipe()
	c, err := startChild("upstream", []string{exe, "-role=upstream", "-upstreams=" + strconv.Itoa(n)}, cpus, len(cpus), nil,
		filepath.Join(dir, "upstream.log"), pw)
	if err != nil {
		return nil, nil, err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "LISTEN "); ok {
				lines <- a
			}
		}
	}()
	select {
	case a := <-lines:
		return c, strings.Split(a, ","), nil
	case <-time.After(20 * time.Second):
		c.stop()
		return nil, nil, fmt.Errorf("upstream did not start: %s", c.logTail())
	}
}

// httpGet is a bounded GET for admin endpoints.
func httpGet(url string, timeout time.Duration) ([]byte, error) {
	cl := &http.Client{Timeout: timeout}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return b, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(b))
	}
	return b, nil
}

// httpPost is a bounded, empty POST.
func httpPost(url string, timeout time.Duration) ([]byte, error) {
	cl := &http.Client{Timeout: timeout}
	resp, err := cl.Post(url, "text/plain", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		return b, fmt.Errorf("POST %s: %s", url, resp.Status)
	}
	return b, nil
}
