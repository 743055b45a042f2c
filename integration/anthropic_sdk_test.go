package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/simreplica"
)

// sdkSource holds the SDK check: package.json and package-lock.json (the
// pinned @anthropic-ai/sdk) and stream.mjs.
const sdkSource = "testdata/anthropic-sdk"

// sdkOutcome is what stream.mjs records of one SDK call.
type sdkOutcome struct {
	OK         bool           `json:"ok"`
	Name       string         `json:"name"`
	Status     *int           `json:"status"`
	ErrorType  *string        `json:"errorType"`
	Message    string         `json:"message"`
	Text       string         `json:"text"`
	StopReason string         `json:"stopReason"`
	Type       string         `json:"type"`
	Events     []string       `json:"events"`
	Usage      map[string]int `json:"usage"`
	Input      int            `json:"inputTokens"`
}

// sdkInstall installs the pinned SDK with npm into a git-ignored cache
// (tmp/anthropic-sdk at the repository root, reused while the lock file is
// unchanged) and returns that folder with stream.mjs copied in. It skips
// the test, saying why, when node or npm is missing or npm cannot reach
// its registry.
func sdkInstall(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the @anthropic-ai/sdk check needs node and npm")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: the @anthropic-ai/sdk check needs node and npm")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir = filepath.Join(root, "tmp", "anthropic-sdk")
	h := sha256.New()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(sdkSource, f))
		require.NoError(t, err)
		h.Write(b)
	}
	stamp := hex.EncodeToString(h.Sum(nil))
	stampFile := filepath.Join(dir, ".installed")
	if got, err := os.ReadFile(stampFile); err != nil || string(got) != stamp {
		require.NoError(t, os.RemoveAll(dir))
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for _, f := range []string{"package.json", "package-lock.json"} {
			b, _ := os.ReadFile(filepath.Join(sdkSource, f))
			require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
		}
		// Ask the registry first: npm ci retries for minutes when it is
		// unreachable.
		pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer pcancel()
		if out, err := exec.CommandContext(pctx, npm, "ping", "--fetch-retries=0", "--fetch-timeout=10000").CombinedOutput(); err != nil {
			msg := bytes.TrimSpace(out)
			if i := bytes.IndexByte(msg, '\n'); i > 0 {
				msg = msg[:i]
			}
			t.Skipf("npm cannot reach its registry (npm ping: %v: %s): the @anthropic-ai/sdk check is skipped", err, msg)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci failed with the registry reachable: %v\n%s", err, out)
		}
		require.NoError(t, os.WriteFile(stampFile, []byte(stamp), 0o644))
	}
	script, err := os.ReadFile(filepath.Join(sdkSource, "stream.mjs"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "stream.mjs"), script, 0o644))
	return node, dir
}

// TestAnthropicSDK runs the real @anthropic-ai/sdk npm client through the
// router in front of simulated replicas: a stream read whole (with the
// SDK's own accumulating helper and as raw events), a JSON answer, a token
// count and a bad key all behave as against Anthropic's API, and a stream
// the replica cuts midway makes the SDK raise (both ways of reading it),
// never return a message it did not get whole.
func TestAnthropicSDK(t *testing.T) {
	node, dir := sdkInstall(t)
	cfg := baseConfig()
	cfg.Strategy = "prefix_load"
	// llama.cpp's server answers /v1/messages natively, with
	// cache_read_input_tokens (vLLM and SGLang write none).
	e, _ := newSimEnvAs(t, 2, cfg, simreplica.LlamaCpp)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "stream.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LLMROUTE_URL="+e.url, "LLMROUTE_KEY="+apiKey)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node stream.mjs: %s", stderr.String())
	t.Logf("SDK outcomes: %s", bytes.TrimSpace(out))
	var res map[string]sdkOutcome
	require.NoError(t, json.Unmarshal(out, &res), "%s", out)

	h := res["helper"]
	require.True(t, h.OK, "messages.stream().finalMessage(): %+v", h)
	assert.Len(t, strings.Fields(h.Text), 8, "the replica's eight tokens")
	assert.Equal(t, "end_turn", h.StopReason)
	assert.Positive(t, h.Usage["input_tokens"])
	assert.Equal(t, 8, h.Usage["output_tokens"])
	again := res["helperAgain"]
	require.True(t, again.OK, "%+v", again)
	assert.Positive(t, again.Usage["cache_read_input_tokens"], "the same prompt again: same replica, cached")

	raw := res["raw"]
	require.True(t, raw.OK, "raw stream: %+v", raw)
	require.NotEmpty(t, raw.Events)
	assert.Equal(t, "message_start", raw.Events[0])
	assert.Equal(t, "message_stop", raw.Events[len(raw.Events)-1])
	assert.Len(t, strings.Fields(raw.Text), 8)

	j := res["json"]
	require.True(t, j.OK, "messages.create(): %+v", j)
	assert.Equal(t, "message", j.Type)
	assert.Equal(t, "end_turn", j.StopReason)
	assert.Positive(t, j.Usage["cache_read_input_tokens"])

	c := res["count"]
	require.True(t, c.OK, "countTokens(): %+v", c)
	assert.Positive(t, c.Input)

	bad := res["badKey"]
	require.False(t, bad.OK)
	assert.Equal(t, "AuthenticationError", bad.Name, "%+v", bad)
	require.NotNil(t, bad.ErrorType, "the SDK parsed the error body: %+v", bad)
	assert.Equal(t, "authentication_error", *bad.ErrorType)

	for _, k := range []string{"helperCut", "rawCut"} {
		cut := res[k]
		assert.False(t, cut.OK, "%s: the SDK must raise on a stream cut midway, got %+v", k, cut)
		assert.Nil(t, cut.Status, "%s: a broken connection, not an HTTP error: %+v", k, cut)
		assert.NotEmpty(t, cut.Name, k)
	}
	rawCut := res["rawCut"]
	assert.Contains(t, rawCut.Events, "message_start", "the cut came midway")
	assert.NotContains(t, rawCut.Events, "message_stop")
}
