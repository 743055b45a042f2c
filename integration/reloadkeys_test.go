package integration

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/internal/testrig/caddyproc"
	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
)

// TestReloadsNeverRefuseValidKeys reloads the config through the admin
// API (29 reloads: PATCHes of a tenant's weight and POST /load of the
// whole Caddyfile, in turn) while workers send requests with
// the default tenant's key and a named tenant's: a valid key is never
// unknown while a new config provisions, so no request gets 401.
func TestReloadsNeverRefuseValidKeys(t *testing.T) {
	cfg := baseConfig()
	cfg.MaxInFlight, cfg.QueueSize = 16, 64
	cfg.Tenants = []string{tenantBlock("rk", "keys sk-reload-keys", "weight 1")}
	e := newEnv(t, 2, nil, cfg)
	stop := make(chan struct{})
	var answered, unauthorized, ok, connErr atomic.Int64
	other := sync.Map{}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := []string{apiKey, "sk-reload-keys"}[w%2]
			for i := 0; i < 400; i++ { // bounded; stop ends it sooner
				select {
				case <-stop:
					return
				default:
				}
				res := e.do(newID(t), chatBody(w%3 == 0, false, fmt.Sprintf("reload %d %d", w, i)),
					as(key, map[string]string{fakereplica.HeaderChunks: "2"}))
				if res.Err != nil {
					connErr.Add(1) // the old server closed a keep-alive connection: no answer
					continue
				}
				answered.Add(1)
				switch res.Status {
				case http.StatusUnauthorized:
					unauthorized.Add(1)
				case http.StatusOK:
					ok.Add(1)
				default:
					other.Store(res.Status, true)
				}
			}
		}()
	}
	const reloads = 29
	admin := caddyproc.NewAdmin(e.cfg.AdminAddr)
	for i := range reloads {
		if i%2 == 0 {
			e.patch(llmRoutePath+"/tenants/rk/weight", 1+i%3)
		} else {
			c := e.cfg
			c.Tenants = []string{tenantBlock("rk", "keys sk-reload-keys", fmt.Sprintf("weight %d", 1+i%3))}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			require.NoError(t, admin.Load(ctx, c.Caddyfile()))
			cancel()
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reloads: %d answers, %d ok, %d 401, %d connection errors", reloads, answered.Load(), ok.Load(), unauthorized.Load(), connErr.Load())
	require.Positive(t, ok.Load())
	assert.Zero(t, unauthorized.Load(), "a valid key got 401 during a reload")
	other.Range(func(k, _ any) bool {
		t.Errorf("status %v during reloads", k)
		return true
	})
}
