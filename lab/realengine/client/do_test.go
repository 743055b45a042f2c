package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestDo reads a whole stream, a cut one and one with a chunk that is not
// JSON through Client.Do.
func TestDo(t *testing.T) {
	const (
		role    = `data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
		tok     = `data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}` + "\n\n"
		finish  = `data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}` + "\n\n"
		usage   = `data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}}` + "\n\n"
		done    = "data: [DONE]\n\n"
		garbage = "data: {oops\n\n"
	)
	bodies := map[string]string{
		"whole": role + tok + finish + usage + done,
		"cut":   role + tok,
		"bad":   role + tok + garbage + finish + usage + done,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-Replica", "r1")
		w.Header().Set("X-Engine-Slot", "slot=2 reuse=5 busy_reuse=7")
		fmt.Fprint(w, bodies[r.URL.Query().Get("b")])
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name     string
		complete bool
		chunks   int
		errPart  string
	}{
		{"whole", true, 4, ""},
		{"cut", false, 2, ""},
		{"bad", false, 4, "bad chunk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Client{URL: srv.URL + "/?b=" + tc.name, Model: "m", MaxTokens: 1, ReplicaHeader: "X-Replica", HTTP: srv.Client()}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			r := c.Do(ctx, Request{Index: 3, Group: 1, System: "s", User: "u"}, time.Now())
			if r.Complete != tc.complete || r.Chunks != tc.chunks || !strings.Contains(r.Error, tc.errPart) || (tc.errPart == "" && r.Error != "") {
				t.Fatalf("result %+v", r)
			}
			if r.Status != 200 || r.Replica != "r1" || r.Slot != 2 || r.BusyReuse != 7 || r.TTFTMs < 0 || r.Index != 3 {
				t.Fatalf("result %+v", r)
			}
			if tc.complete && (r.PromptTokens != 40 || r.CachedTokens != 32 || r.Finish != "length" || !r.Done) {
				t.Fatalf("usage or finish wrong: %+v", r)
			}
		})
	}
}

// TestReadPrediction sums the router's state and metrics as the admin
// endpoint serves them.
func TestReadPrediction(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/llm_route/state":
			fmt.Fprint(w, `{"replicas":[`+
				`{"addr":"a","engine":{"engine":"vllm"},"feedback":{"checks":5,"hits":3,"misses":1,"cold":1}},`+
				`{"addr":"b","engine":{"engine":"vllm","last_error":"timeout"},"feedback":{"checks":2,"hits":1,"concurrent":1,"purges":1}}],`+
				`"total_in_flight":0,"queued":0}`)
		case "/metrics":
			fmt.Fprint(w, "llmroute_predicted_cached_tokens_total 90\nllmroute_reported_cached_tokens_total 100\n"+
				"llmroute_predictions_total{replica=\"a\",result=\"hit\"} 3\nllmroute_requests_total{outcome=\"ok\",replica=\"a\",strategy=\"x\"} 7\n")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	p, err := ReadPrediction(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if p.Checks != 7 || p.Hits != 4 || p.Misses != 1 || p.Concurrent != 1 || p.Purges != 1 || p.Precision != 0.8 {
		t.Fatalf("counts %+v", p)
	}
	if !p.EngineScrapeOK || p.EngineScrapeErr != "b: timeout" || p.PredictedOverReported != 0.9 || p.Results["hit"] != 3 || p.Outcomes["ok"] != 7 || len(p.PerReplica) != 2 {
		t.Fatalf("prediction %+v", p)
	}
}
