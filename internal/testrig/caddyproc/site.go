package caddyproc

import (
	"bytes"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// SiteConfig describes the Caddyfile a test or the soak runs: one site on
// a loopback address with llm_route in front of reverse_proxy and the llm
// policy, retries as in Caddyfile.example.
type SiteConfig struct {
	AdminAddr  string // 127.0.0.1:port of the admin API
	ListenAddr string // 127.0.0.1:port of the site
	Upstreams  []string

	// Dynamic, when set, is a reverse_proxy dynamic upstream block (for
	// example "dynamic a svc.test. 8000 {\n\trefresh 200ms\n}"), rendered
	// in the reverse_proxy block after the static Upstreams (usually none).
	Dynamic string
	// TransportResolvers, when set, are the DNS servers the http transport
	// resolves upstream host names with (dynamic srv targets).
	TransportResolvers []string

	APIKey       string // "" turns authentication off
	MaxBodyBytes string // e.g. "64KiB"; "" keeps the default
	ReplicaHdr   string // "" turns the replica header off
	NoUsage      bool   // leave request_usage off
	// AllowPaths is llm_route's allow_paths.
	AllowPaths []string
	// Tenants are llm_route's tenant blocks, rendered as given (for
	// example "tenant alice {\n\tkeys sk-alice\n\tweight 2\n}").
	Tenants []string
	// AccessLog turns on the site's access log (to caddy's log) with the
	// credential filter of Caddyfile.example.
	AccessLog bool

	Strategy     string
	MaxInFlight  int
	QueueSize    int
	QueueTimeout time.Duration
	CooldownBase time.Duration
	CooldownMax  time.Duration
	FailStatus   []int
	// StatusFails is status_fails; 0 keeps the default.
	StatusFails int
	// SlowStart, when set, is the policy's slow_start ramp.
	SlowStart time.Duration
	// SheddableShare is sheddable_share; 0 keeps the default.
	SheddableShare float64
	// EngineMetrics, when set, is engine_metrics' scrape interval, and
	// EngineMetricsKey its api_key ("" for none).
	EngineMetrics    time.Duration
	EngineMetricsKey string

	// Retries is lb_retries; NoRetryMatch leaves out the lb_retry_match
	// rules (429/503 and transport errors).
	Retries      int
	NoRetryMatch bool

	DialTimeout           time.Duration
	ResponseHeaderTimeout time.Duration
	// RequestBuffers, when set, is reverse_proxy's request_buffers size.
	RequestBuffers string

	// LogLevel is Caddy's default log level (default WARN).
	LogLevel string
}

var siteTmpl = template.Must(template.New("caddyfile").Funcs(template.FuncMap{
	"join": strings.Join,
	"ints": func(xs []int) string {
		s := make([]string, len(xs))
		for i, x := range xs {
			s[i] = strconv.Itoa(x)
		}
		return strings.Join(s, " ")
	},
	// indent puts tabs before every line of s after the first.
	"indent": func(tabs int, s string) string {
		return strings.ReplaceAll(s, "\n", "\n"+strings.Repeat("\t", tabs))
	},
}).Parse(`{
	admin {{.AdminAddr}}
	auto_https off
	persist_config off
	grace_period 2s
	metrics
	log {
		output stderr
		level {{.LogLevel}}
	}
}

http://{{.ListenAddr}} {
	bind 127.0.0.1
{{- if .AccessLog}}
	log {
		output stderr
		format filter {
			wrap json
			fields {
				request>uri query {
					delete api_key
					delete api-key
					delete apikey
					delete key
					delete access_token
				}
			}
		}
	}
{{- end}}
	llm_route {
{{- if .APIKey}}
		api_keys {{.APIKey}}
{{- end}}
		deployment test-model-v1
{{- if .MaxBodyBytes}}
		max_body_bytes {{.MaxBodyBytes}}
{{- end}}
{{- if .ReplicaHdr}}
		replica_header {{.ReplicaHdr}}
{{- end}}
{{- if .AllowPaths}}
		allow_paths {{join .AllowPaths " "}}
{{- end}}
{{- if not .NoUsage}}
		request_usage
{{- end}}
{{- range .Tenants}}
		{{indent 2 .}}
{{- end}}
	}
	reverse_proxy {{join .Upstreams " "}} {
{{- if .Dynamic}}
		{{indent 2 .Dynamic}}
{{- end}}
		lb_policy llm {
			strategy {{.Strategy}}
			max_in_flight {{.MaxInFlight}}
			queue_size {{.QueueSize}}
			queue_timeout {{.QueueTimeout}}
			cooldown {{.CooldownBase}} {{.CooldownMax}} {
{{- if .FailStatus}}
				fail_status {{ints .FailStatus}}
{{- end}}
{{- if .StatusFails}}
				status_fails {{.StatusFails}}
{{- end}}
			}
{{- if .SlowStart}}
			slow_start {{.SlowStart}}
{{- end}}
{{- if .SheddableShare}}
			sheddable_share {{.SheddableShare}}
{{- end}}
{{- if .EngineMetrics}}
			engine_metrics {
				interval {{.EngineMetrics}}
{{- if .EngineMetricsKey}}
				api_key {{.EngineMetricsKey}}
{{- end}}
			}
{{- end}}
		}
{{- if .Retries}}
		lb_retries {{.Retries}}
{{- end}}
{{- if not .NoRetryMatch}}
		lb_retry_match {
			expression ` + "`{rp.status_code} in [429, 503]`" + `
		}
		lb_retry_match {
			expression ` + "`{rp.is_transport_error} == true`" + `
		}
{{- end}}
{{- if .RequestBuffers}}
		request_buffers {{.RequestBuffers}}
{{- end}}
		transport http {
			dial_timeout {{.DialTimeout}}
			response_header_timeout {{.ResponseHeaderTimeout}}
{{- if .TransportResolvers}}
			resolvers {{join .TransportResolvers " "}}
{{- end}}
		}
	}
}
`))

// Caddyfile renders the config, filling defaults for zero fields.
func (c SiteConfig) Caddyfile() string {
	if c.Strategy == "" {
		c.Strategy = "prefix_load"
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 16
	}
	if c.QueueSize == 0 {
		c.QueueSize = 64
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = 10 * time.Second
	}
	if c.CooldownBase == 0 {
		c.CooldownBase = time.Second
	}
	if c.CooldownMax == 0 {
		c.CooldownMax = 30 * time.Second
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = 2 * time.Second
	}
	if c.ResponseHeaderTimeout == 0 {
		c.ResponseHeaderTimeout = 120 * time.Second
	}
	if c.LogLevel == "" {
		c.LogLevel = "WARN"
	}
	var b bytes.Buffer
	if err := siteTmpl.Execute(&b, c); err != nil {
		panic(err)
	}
	return b.String()
}
