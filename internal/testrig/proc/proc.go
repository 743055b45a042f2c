// Package proc runs the child processes of llmroute's tests and tools
// (caddy, replicas, proxies, load generators): output appended to a log
// file, stopped with SIGTERM and, after a grace period, SIGKILL, and the
// log's tail readable for error messages.
package proc

import (
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Proc is one started process.
type Proc struct {
	// Cmd is the command as started.
	Cmd *exec.Cmd
	// LogPath is the file that receives its output ("" when the command
	// kept its own).
	LogPath string

	done     chan struct{}
	err      error
	stopOnce sync.Once
}

// Start starts cmd. With a logPath, its stderr, and its stdout unless cmd
// already has one, go to a new file there, closed when the process ends;
// with "", cmd's own Stdout and Stderr stay.
func Start(cmd *exec.Cmd, logPath string) (*Proc, error) {
	var logf *os.File
	if logPath != "" {
		var err error
		if logf, err = os.Create(logPath); err != nil {
			return nil, err
		}
		cmd.Stderr = logf
		if cmd.Stdout == nil {
			cmd.Stdout = logf
		}
	}
	if err := cmd.Start(); err != nil {
		if logf != nil {
			logf.Close()
		}
		return nil, err
	}
	p := &Proc{Cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Done is closed when the process has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the process's exit error; valid once Done is closed.
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process: SIGTERM, then SIGKILL after grace, and waits for
// it. It is safe to call more than once, and on a nil Proc.
func (p *Proc) Stop(grace time.Duration) {
	if p == nil {
		return
	}
	p.stopOnce.Do(func() {
		if p.Exited() {
			return
		}
		_ = p.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
	})
	<-p.done
}

// LogTail returns the last n bytes of the process's log.
func (p *Proc) LogTail(n int) string {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
