package simreplica

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/simengine"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startLongStream starts a chat stream of 1000 tokens at real-time speed
// (about 10 s) and returns once its first content chunk arrived.
func startLongStream(t *testing.T, r *replica, ctx context.Context) (*http.Response, *bufio.Reader) {
	t.Helper()
	resp, err := r.post(t, ctx, pathChat, chatBody("long", true, nil), HeaderOutputTokens, "1000")
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	br := bufio.NewReader(resp.Body)
	for seen := 0; seen < 2; { // role chunk, first content chunk
		line, err := br.ReadString('\n')
		require.NoError(t, err)
		if strings.HasPrefix(line, "data: ") {
			seen++
		}
	}
	return resp, br
}

func TestClientDisconnectCancelsSequence(t *testing.T) {
	r := startReplica(t, Config{Engine: simengine.Config{NumBlocks: 256, Speed: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, _ := startLongStream(t, r, ctx)
	defer resp.Body.Close()

	st := r.s.Stats()
	assert.Equal(t, 1, st.Engine.Running)
	fams := scrape(t, r)
	assert.Equal(t, 1.0, value(t, fams, "vllm:num_requests_running", dto.MetricType_GAUGE, nil))
	assert.Positive(t, value(t, fams, "vllm:kv_cache_usage_perc", dto.MetricType_GAUGE, nil))

	cancel()
	eventually(t, 2*time.Second, func() bool {
		s := r.s.Stats()
		return s.Aborted == 1 && s.Engine.Running == 0 && s.Engine.Cancelled == 1
	}, "the engine sequence is cancelled and the request counted as aborted")
	assert.Zero(t, r.s.Stats().Completed)
}

func TestRestartEndpoint(t *testing.T) {
	r := startReplica(t, Config{Engine: simengine.Config{NumBlocks: 256, Speed: 1}})
	prompt := longText(8, 200)
	resp, err := r.post(t, context.Background(), pathCompletions, map[string]any{"model": "m", "prompt": prompt, "max_tokens": 1})
	require.NoError(t, err)
	drain(resp)
	require.Positive(t, r.s.Stats().Engine.CachedBlocks)

	stream, br := startLongStream(t, r, context.Background())
	defer stream.Body.Close()

	resp, err = r.post(t, context.Background(), pathSimRestart, `{"down_ms":300}`)
	require.NoError(t, err)
	assert.Contains(t, drain(resp), `"aborted":1`)

	// The in-flight stream is cut.
	_, err = io.ReadAll(br)
	assert.True(t, errors.Is(err, io.ErrUnexpectedEOF), "got %v", err)

	// Down: health and inference answer 503.
	code, _, body := r.get(t, pathHealth)
	assert.Equal(t, 503, code)
	assert.Equal(t, "restarting", body)
	resp, err = r.post(t, context.Background(), pathChat, chatBody("x", false, nil))
	require.NoError(t, err)
	drain(resp)
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))

	// Back up, with an empty cache and fresh engine counters.
	eventually(t, 3*time.Second, func() bool { c, _, _ := r.get(t, pathHealth); return c == 200 }, "up again")
	st := r.s.Stats()
	assert.Zero(t, st.Engine.CachedBlocks)
	assert.Zero(t, st.Engine.PrefixCacheQueries)
	fams := scrape(t, r)
	assert.Zero(t, value(t, fams, "vllm:prompt_tokens_total", dto.MetricType_COUNTER, nil))
	assert.EqualValues(t, 1, value(t, fams, "sim_requests_total", dto.MetricType_COUNTER, map[string]string{"path": pathSimRestart}))
	resp, err = r.post(t, context.Background(), pathCompletions, map[string]any{"model": "m", "prompt": prompt, "max_tokens": 1})
	require.NoError(t, err)
	assert.Zero(t, decodeCompletion(t, resp).Usage.PromptTokensDetails.CachedTokens)
}

func TestCloseAbortsInFlightAndLeaksNoGoroutines(t *testing.T) {
	runtime.GC()
	base := runtime.NumGoroutine()

	r := startReplica(t, Config{Engine: simengine.Config{NumBlocks: 256, Speed: 1}})
	// Some finished traffic, a cancelled stall and a cut stream...
	resp, err := r.post(t, context.Background(), pathChat, chatBody("a", true, nil))
	require.NoError(t, err)
	readSSE(t, resp.Body, nil)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, _ = r.post(t, ctx, pathChat, chatBody("b", false, nil), HeaderFault, "stall", HeaderStallMs, "5000")
	cancel()
	resp, err = r.post(t, context.Background(), pathChat, chatBody("c", true, nil), HeaderFault, "cut-after=1")
	require.NoError(t, err)
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	// ...and, in flight at Close, a long stream and a stalled request.
	stream, br := startLongStream(t, r, context.Background())
	defer stream.Body.Close()
	stalled := make(chan error, 1)
	go func() {
		resp, err := r.post(t, context.Background(), pathChat, chatBody("d", false, nil), HeaderFault, "stall", HeaderStallMs, "60000")
		if err == nil {
			resp.Body.Close()
		}
		stalled <- err
	}()
	eventually(t, 2*time.Second, func() bool { return r.s.Stats().Received == 5 }, "stalled request arrived")

	start := time.Now()
	r.close()
	assert.Less(t, time.Since(start), 2*time.Second, "Close is quick")
	_, err = io.ReadAll(br)
	assert.Error(t, err, "the in-flight stream was cut")
	select {
	case <-stalled:
	case <-time.After(3 * time.Second):
		t.Fatal("stalled request still pending after Close")
	}

	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > base {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines: %d before, %d after Close\n%s", base, n, buf[:runtime.Stack(buf, true)])
	}
}
