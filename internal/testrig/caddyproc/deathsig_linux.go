package caddyproc

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill caddy if this process dies first.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
