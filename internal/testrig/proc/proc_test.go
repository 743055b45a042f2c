package proc

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStartLogsAndEnds(t *testing.T) {
	p, err := Start(exec.Command("sh", "-c", "echo out; echo err >&2"), filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not end")
	}
	assert.True(t, p.Exited())
	assert.NoError(t, p.Err())
	assert.Equal(t, "out\nerr\n", p.LogTail(100))
	assert.Equal(t, "rr\n", p.LogTail(3))
	p.Stop(time.Second) // after the end: nothing to do
}

func TestStopTermThenKill(t *testing.T) {
	// Exits on SIGTERM.
	p, err := Start(exec.Command("sleep", "30"), filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	assert.False(t, p.Exited())
	start := time.Now()
	p.Stop(5 * time.Second)
	assert.True(t, p.Exited())
	assert.Less(t, time.Since(start), 5*time.Second, "SIGTERM should have ended it")

	// Ignores SIGTERM: killed after the grace period.
	p, err = Start(exec.Command("sh", "-c", "trap '' TERM; echo ready; sleep 30"), filepath.Join(t.TempDir(), "log"))
	require.NoError(t, err)
	for i := 0; i < 200 && !strings.Contains(p.LogTail(10), "ready"); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	start = time.Now()
	p.Stop(200 * time.Millisecond)
	assert.True(t, p.Exited())
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	assert.Error(t, p.Err(), "killed")
	p.Stop(time.Second) // twice is fine
	var nilProc *Proc
	nilProc.Stop(time.Second)
}

func TestStartWithoutLogKeepsOutput(t *testing.T) {
	var out strings.Builder
	cmd := exec.Command("sh", "-c", "echo kept")
	cmd.Stdout = &out
	p, err := Start(cmd, "")
	require.NoError(t, err)
	require.NoError(t, p.Err())
	assert.Equal(t, "kept\n", out.String())
	assert.Empty(t, p.LogPath)
}
