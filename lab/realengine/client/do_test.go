package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
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
		w.Header().Set("X-Engine-Slot", "slot=2 reuse=5 busy_reuse=7 lcp=11")
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
			if r.Status != 200 || r.Replica != "r1" || r.Slot != 2 || r.BusyReuse != 7 || r.EngineLCP != 11 || r.TTFTMs < 0 || r.Index != 3 || r.Answer != "a" {
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

// TestRunClosedConversations runs a multi_turn plan against a fake engine
// that answers with the turn it saw: every turn is sent after the one
// before it ended, with the earlier questions and the engine's own answers.
func TestRunClosedConversations(t *testing.T) {
	plan, err := Plan(WorkloadConfig{Name: MultiTurn, Groups: 3, PerGroup: 4, SystemChars: 100, Rate: 1, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running := map[string]bool{} // system prompt -> a turn in flight
	var overlap int
	seen := map[int][]Message{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Messages []Message `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		sys := body.Messages[0].Content
		idx, _ := strconv.Atoi(r.Header.Get("X-Bench-Request"))
		mu.Lock()
		if running[sys] {
			overlap++
		}
		running[sys] = true
		seen[idx] = body.Messages
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		answer := fmt.Sprintf("answer to turn %d", (len(body.Messages)-1)/2)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":%q},\"finish_reason\":null}]}\n\n", answer[:7])
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", answer[7:])
		fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"+
			"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
		mu.Lock()
		running[sys] = false
		mu.Unlock()
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL, Model: "m", MaxTokens: 2, HTTP: srv.Client()}
	rs := c.RunClosed(context.Background(), plan, 3, 10*time.Second)
	if overlap != 0 {
		t.Fatalf("%d turns overlapped an earlier turn of their conversation", overlap)
	}
	turns := map[int]int{}
	for i, r := range rs {
		p := plan[i]
		if !r.Complete || r.Turn != p.Turn || r.Answer != fmt.Sprintf("answer to turn %d", p.Turn) {
			t.Fatalf("request %d (turn %d): %+v", i, p.Turn, r)
		}
		ms := seen[i]
		if len(ms) != 2+2*p.Turn || ms[len(ms)-1].Content != p.User {
			t.Fatalf("request %d (turn %d) sent %d messages", i, p.Turn, len(ms))
		}
		if p.Prev >= 0 {
			prev := seen[p.Prev]
			// The earlier turn's messages, then its answer, as sent.
			for k := range prev {
				if ms[k] != prev[k] {
					t.Fatalf("request %d message %d = %+v, turn before sent %+v", i, k, ms[k], prev[k])
				}
			}
			if a := ms[len(prev)]; a.Role != "assistant" || a.Content != rs[p.Prev].Answer {
				t.Fatalf("request %d repeats answer %+v, the engine said %q", i, a, rs[p.Prev].Answer)
			}
		}
		turns[p.Group]++
	}
	if len(turns) != 3 || turns[0] != 4 || turns[1] != 4 || turns[2] != 4 {
		t.Fatalf("turns per conversation %v", turns)
	}
}

// TestRunClosedDeadline: requests not sent by the deadline are marked so,
// and a waiting client does not hang.
func TestRunClosedDeadline(t *testing.T) {
	plan, _ := Plan(WorkloadConfig{Name: MultiTurn, Groups: 1, PerGroup: 5, SystemChars: 10, Rate: 1, Seed: 1})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read the body, so that the server notices the client leave.
		io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL, Model: "m", MaxTokens: 1, HTTP: srv.Client()}
	start := time.Now()
	rs := c.RunClosed(context.Background(), plan, 2, 200*time.Millisecond)
	if time.Since(start) > 5*time.Second {
		t.Fatal("RunClosed outlived its deadline")
	}
	notSent := 0
	for _, r := range rs {
		if r.Complete {
			t.Fatalf("complete result %+v", r)
		}
		if strings.HasPrefix(r.Error, "not sent") {
			notSent++
		}
	}
	if notSent != 4 {
		t.Fatalf("%d of 5 not sent, want 4 (the first turn was in flight)", notSent)
	}
}

func TestEngineSlotAndAnswer(t *testing.T) {
	for _, tc := range []struct {
		h               string
		slot, busy, lcp int
	}{
		{"slot=2 reuse=5 busy_reuse=7 lcp=9", 2, 7, 9},
		{"slot=1 reuse=0 busy_reuse=0", 1, 0, -1},
		{"garbage", -1, 0, -1},
	} {
		if s, b, l := engineSlot(tc.h); s != tc.slot || b != tc.busy || l != tc.lcp {
			t.Errorf("engineSlot(%q) = %d %d %d", tc.h, s, b, l)
		}
	}
	stream := "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hé\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other choice\"}}]}\n\n" +
		"data: {oops\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there\"}}]}\n\ndata: [DONE]\n\ndata: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"late\"}}]}\n\n"
	if got := answerText([]byte(stream)); got != "Hé there" {
		t.Fatalf("answerText = %q", got)
	}
}

// TestDoAnswerLength: a request's own answer length wins over the
// client's, which applies when the request has none.
func TestDoAnswerLength(t *testing.T) {
	got := make(chan int, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			MaxTokens int `json:"max_tokens"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		got <- body.MaxTokens
		http.Error(w, "no", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c := &Client{URL: srv.URL, Model: "m", MaxTokens: 8, HTTP: srv.Client()}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, tc := range []struct{ own, want int }{{0, 8}, {21, 21}} {
		if r := c.Do(ctx, Request{User: "u", MaxTokens: tc.own}, time.Now()); r.Status != http.StatusServiceUnavailable {
			t.Fatalf("result %+v", r)
		}
		if n := <-got; n != tc.want {
			t.Errorf("request's own %d: max_tokens %d, want %d", tc.own, n, tc.want)
		}
	}
}
