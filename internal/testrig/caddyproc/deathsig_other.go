//go:build !linux

package caddyproc

import "os/exec"

func setDeathSignal(*exec.Cmd) {}
