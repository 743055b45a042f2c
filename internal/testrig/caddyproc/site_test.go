package caddyproc

import (
	"strings"
	"testing"
	"time"
)

func TestCaddyfile(t *testing.T) {
	base := SiteConfig{AdminAddr: "127.0.0.1:2999", ListenAddr: "127.0.0.1:8999", Upstreams: []string{"127.0.0.1:9001", "127.0.0.1:9002"}}
	for _, tc := range []struct {
		name      string
		mod       func(*SiteConfig)
		want, not []string
	}{
		{name: "defaults filled", mod: func(*SiteConfig) {},
			want: []string{"admin 127.0.0.1:2999", "http://127.0.0.1:8999 {", "reverse_proxy 127.0.0.1:9001 127.0.0.1:9002 {",
				"strategy prefix_load", "max_in_flight 16", "queue_size 64", "queue_timeout 10s", "cooldown 1s 30s",
				"dial_timeout 2s", "response_header_timeout 2m0s", "level WARN", "request_usage", "{rp.status_code} in [429, 503]"},
			not: []string{"api_keys", "max_body_bytes", "replica_header", "fail_status", "status_fails", "slow_start", "lb_retries", "request_buffers", "resolvers", "dynamic"}},
		{name: "everything set", mod: func(c *SiteConfig) {
			c.APIKey, c.MaxBodyBytes, c.ReplicaHdr, c.NoUsage = "sk-x", "64KiB", "X-R", true
			c.Strategy, c.MaxInFlight, c.FailStatus, c.StatusFails = "least_load", 3, []int{500, 502}, 4
			c.SlowStart, c.Retries, c.NoRetryMatch, c.RequestBuffers = 5*time.Second, 2, true, "1MiB"
			c.TransportResolvers, c.Dynamic, c.LogLevel = []string{"127.0.0.1:5353"}, "dynamic a svc.test. 8000 {\n\trefresh 200ms\n}", "ERROR"
		}, want: []string{"api_keys sk-x", "max_body_bytes 64KiB", "replica_header X-R", "strategy least_load", "max_in_flight 3",
			"fail_status 500 502", "status_fails 4", "slow_start 5s", "lb_retries 2", "request_buffers 1MiB",
			"resolvers 127.0.0.1:5353", "\t\tdynamic a svc.test. 8000 {\n\t\t\trefresh 200ms\n\t\t}", "level ERROR"},
			not: []string{"request_usage", "lb_retry_match"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.mod(&c)
			got := c.Caddyfile()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing %q in:\n%s", w, got)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("unexpected %q in:\n%s", n, got)
				}
			}
		})
	}
}
