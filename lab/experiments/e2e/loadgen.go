package e2e

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/openai"
)

// Outcome is what the client saw of one streamed request.
type Outcome struct {
	Status int
	// Err is a transport error or a non-200 status.
	Err string
	// Incomplete: the stream ended without [DONE] or without a finish
	// reason (a cut stream).
	Incomplete   bool
	TTFT         time.Duration // to the first content chunk
	Latency      time.Duration // to the end of the stream
	PromptTokens int
	CachedTokens int
	OutputTokens int
	Chunks       int
	Replica      string
	Finish       string
}

// send posts one streaming chat request and reads its stream to the end.
func send(ctx context.Context, client *http.Client, url string, body []byte, outputTokens int, replicaHeader string) Outcome {
	var o Outcome
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		o.Err = err.Error()
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	// The simulated replica's natural answer length for this request.
	req.Header.Set("X-Sim-Output-Tokens", strconv.Itoa(outputTokens))
	resp, err := client.Do(req)
	if err != nil {
		o.Err = err.Error()
		o.Latency = time.Since(start)
		return o
	}
	defer resp.Body.Close()
	o.Status = resp.StatusCode
	o.Replica = resp.Header.Get(replicaHeader)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o.Err = "status " + strconv.Itoa(resp.StatusCode) + ": " + strings.TrimSpace(string(b))
		o.Latency = time.Since(start)
		return o
	}
	st := openai.ReadStream(resp.Body)
	o.Latency = time.Since(start)
	if !st.FirstContent.IsZero() {
		o.TTFT = st.FirstContent.Sub(start)
	}
	o.Chunks, o.Finish = st.ContentChunks, st.Finish
	if st.Usage != nil {
		o.PromptTokens, o.OutputTokens, o.CachedTokens = st.Usage.PromptTokens, st.Usage.CompletionTokens, st.Usage.Cached()
	}
	o.Incomplete = !st.Done || o.Finish == "" || st.Err != nil
	return o
}

// Arrival is one request of an open-loop schedule.
type Arrival struct {
	At           time.Duration
	Body         []byte
	OutputTokens int
	// URL, when set, is where this request goes instead of Generate's url
	// (one of several router instances); Router numbers that instance.
	URL    string
	Router int
	// Leading is the request's leading key (policies.Keys.Leading), for
	// agreement on first placements.
	Leading uint64
}

// Generate sends every arrival at its time (open loop: a slow answer never
// delays the next arrival) and returns the outcomes in arrival order. It
// stops sending when ctx ends; requests already sent get until their own
// timeout.
func Generate(ctx context.Context, url string, arrivals []Arrival, timeout time.Duration, replicaHeader string) []Outcome {
	tr := &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: timeout}
	out := make([]Outcome, len(arrivals))
	var wg sync.WaitGroup
	start := time.Now()
	for i, a := range arrivals {
		if d := a.At - time.Since(start); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			for j := i; j < len(arrivals); j++ {
				out[j].Err = "not sent: " + ctx.Err().Error()
			}
			break
		}
		wg.Add(1)
		go func(i int, a Arrival) {
			defer wg.Done()
			u := url
			if a.URL != "" {
				u = a.URL
			}
			out[i] = send(context.Background(), client, u, a.Body, a.OutputTokens, replicaHeader)
		}(i, a)
	}
	wg.Wait()
	return out
}
