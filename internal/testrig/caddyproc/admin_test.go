package caddyproc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmroute/caddy-llmroute/caddymodule/stateapi"
)

// fakeAdmin serves /llm_route/state with total_in_flight counting down
// from busy to 0, /metrics with go_goroutines and POST /load.
func fakeAdmin(t *testing.T, busy int32) (*Admin, *atomic.Int32) {
	var left atomic.Int32
	left.Store(busy)
	var loaded atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case stateapi.Path:
			n := max(left.Add(-1), 0)
			fmt.Fprintf(w, `{"policies":[{"strategy":"prefix_load","max_in_flight":8}],"replicas":[{"addr":"127.0.0.1:9001","in_flight":%d,"cooldown_until":"2030-01-02T03:04:05Z","feedback":{"checks":4,"hits":3}}],"total_in_flight":%d,"queued":0}`, n, n)
		case "/metrics":
			fmt.Fprint(w, "# HELP go_goroutines x\ngo_goroutines 42\n")
		case "/load":
			b, _ := io.ReadAll(r.Body)
			if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "text/caddyfile" || !strings.Contains(string(b), "reverse_proxy") {
				http.Error(w, "bad load", http.StatusBadRequest)
				return
			}
			loaded.Add(1)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return NewAdmin(strings.TrimPrefix(srv.URL, "http://")), &loaded
}

func TestAdminState(t *testing.T) {
	a, _ := fakeAdmin(t, 0)
	ctx := context.Background()
	st, err := a.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := st.Replica("127.0.0.1:9001")
	if !ok || r.Feedback.Hits != 3 || r.CoolUntil == nil || r.CoolUntil.Year() != 2030 || len(st.Policies) != 1 || st.Policies[0].MaxInFlight != 8 {
		t.Fatalf("state decoded as %+v", st)
	}
	if g, err := a.Goroutines(ctx); err != nil || g != 42 {
		t.Fatalf("Goroutines = %d, %v", g, err)
	}
}

func TestAdminWaitIdle(t *testing.T) {
	for _, tc := range []struct {
		name    string
		busy    int32
		timeout time.Duration
		wantErr bool
	}{
		{name: "idle at once", busy: 0, timeout: time.Second},
		{name: "idle after a few reads", busy: 4, timeout: 2 * time.Second},
		{name: "never idle in time", busy: 1 << 20, timeout: 100 * time.Millisecond, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := fakeAdmin(t, tc.busy)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := a.WaitIdle(ctx, tc.timeout)
			if (err != nil) != tc.wantErr || (err == nil && !st.Idle()) {
				t.Fatalf("WaitIdle = %+v, %v; want error %v", st, err, tc.wantErr)
			}
			if tc.wantErr && st.TotalInFlight == 0 {
				t.Fatal("the last state read should still be busy")
			}
		})
	}
}

func TestAdminLoad(t *testing.T) {
	a, loaded := fakeAdmin(t, 0)
	ctx := context.Background()
	if err := a.Load(ctx, SiteConfig{AdminAddr: a.Addr, ListenAddr: "127.0.0.1:1", Upstreams: []string{"127.0.0.1:2"}}.Caddyfile()); err != nil || loaded.Load() != 1 {
		t.Fatalf("Load = %v, %d loads", err, loaded.Load())
	}
	if err := a.Load(ctx, "not a caddyfile"); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("a rejected load returned %v", err)
	}
}
