// Package procstat reads figures of a running process from Linux's /proc,
// for the soak and the bench, which both watch a caddy process.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// StatusKB returns a kB field of /proc/<pid>/status, such as VmRSS or
// VmHWM.
func StatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			v = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB"))
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("%s not found in /proc/%d/status", field, pid)
}
