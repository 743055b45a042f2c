package fakereplica

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/openai"
)

// TestAnswersInOpenAIShapes reads the fake's answers with internal/openai,
// as the soak and the lab's clients do.
func TestAnswersInOpenAIShapes(t *testing.T) {
	rp, err := Start(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rp.Close()
	post := func(id, body string, hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, "http://"+rp.Addr()+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set(HeaderRequestID, id)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	const msgs = `"messages":[{"role":"system","content":"` + "You are a fake replica's test, with a system prompt long enough to be cached." + `"},{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		name   string
		body   string
		usage  bool
		chunks int
	}{
		{"stream with usage", `{"model":"m","stream":true,"stream_options":{"include_usage":true},` + msgs + `}`, true, 3},
		{"stream without usage", `{"model":"m","stream":true,` + msgs + `}`, false, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(tc.name, " ", "-")
			resp := post(id, tc.body, map[string]string{HeaderChunks: strconv.Itoa(tc.chunks)})
			s := openai.ReadStream(resp.Body)
			if resp.StatusCode != 200 || !s.Done || s.Err != nil || s.BadChunk != nil || s.ContentChunks != tc.chunks || s.Finish != "stop" {
				t.Fatalf("status %d, stream %+v", resp.StatusCode, s)
			}
			if (s.Usage != nil) != tc.usage || (tc.usage && (s.Usage.PromptTokens == 0 || s.Usage.CompletionTokens != tc.chunks+1 || s.Usage.PromptTokensDetails == nil)) {
				t.Fatalf("usage %+v, want present %v", s.Usage, tc.usage)
			}
			rs, ok := rp.Tracker().WaitEnded(id, 2*time.Second)
			if !ok || len(rs) != 1 || !rs[0].SentDone || rs[0].ChunksSent != tc.chunks || rs[0].Outcome != OutcomeDone {
				t.Fatalf("receipts %+v", rs)
			}
		})
	}
	resp := post("json", `{"model":"m",`+msgs+`}`, nil)
	var c openai.Completion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.Object != openai.CompletionObject || len(c.Choices) != 1 || c.Choices[0].Message.Content == "" || c.Usage == nil {
		t.Fatalf("JSON answer %+v, %v", c, err)
	}
	resp = post("429", `{"model":"m",`+msgs+`}`, map[string]string{HeaderFault: Fault429})
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || openai.ErrorCode(b) != "fake_429" {
		t.Fatalf("429 answer %d %q: %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
}
