package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestSendDetectsIncompleteStreams checks the client's accounting on a
// whole stream and on streams cut before [DONE] or before a finish reason.
func TestSendDetectsIncompleteStreams(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set(replicaHeader, "r0")
		mode := r.URL.Query().Get("mode")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\" the\"}}]}\n\n")
		if mode == "cut" {
			return
		}
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\" cache\"},\"finish_reason\":\"stop\"}]}\n\n")
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":96}}}\n\n")
		if mode != "nodone" {
			fmt.Fprint(w, "data: [DONE]\n\n")
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	c := srv.Client()
	o := send(ctx, c, srv.URL+"?mode=ok", []byte("{}"), 2, replicaHeader)
	if o.Err != "" || o.Incomplete || o.Chunks != 2 || o.CachedTokens != 96 || o.PromptTokens != 100 || o.Replica != "r0" || o.Finish != "stop" || o.TTFT <= 0 {
		t.Fatalf("whole stream: %+v", o)
	}
	for _, mode := range []string{"cut", "nodone"} {
		if o := send(ctx, c, srv.URL+"?mode="+mode, []byte("{}"), 2, replicaHeader); !o.Incomplete {
			t.Fatalf("%s: not flagged incomplete: %+v", mode, o)
		}
	}
	outs := Generate(ctx, srv.URL+"?mode=ok", []Arrival{{At: 0, Body: []byte("{}")}, {At: 20 * time.Millisecond, Body: []byte("{}")}}, 5*time.Second, replicaHeader)
	r := summarize(outs, time.Second)
	if r.OK != 2 || r.Errors != 0 || r.Incomplete != 0 || r.TokenHitRate != 0.96 {
		t.Fatalf("summary: %+v", r)
	}
}
