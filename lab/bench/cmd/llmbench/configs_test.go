package main

import (
	"strings"
	"testing"
)

// TestLLMCaddyfileOptionalReaders proves what each llm target turns off:
// the plain target asks for usage and indexes answers, _nousage only
// stops the usage, _lean stops both.
func TestLLMCaddyfileOptionalReaders(t *testing.T) {
	for _, tc := range []struct {
		usage, answers bool
		wantUsage      bool
		wantAnswersOff bool
	}{
		{true, true, true, false},
		{false, true, false, false},
		{false, false, false, true},
	} {
		cf := llmCaddyfile("127.0.0.1:2019", "127.0.0.1:8080", []string{"127.0.0.1:9001"}, "prefix_load", 64, tc.usage, tc.answers)
		if got := strings.Contains(cf, "\trequest_usage\n"); got != tc.wantUsage {
			t.Errorf("usage=%v answers=%v: request_usage present %v, want %v", tc.usage, tc.answers, got, tc.wantUsage)
		}
		if got := strings.Contains(cf, "\tindex_answers off\n"); got != tc.wantAnswersOff {
			t.Errorf("usage=%v answers=%v: index_answers off present %v, want %v", tc.usage, tc.answers, got, tc.wantAnswersOff)
		}
		// index_answers belongs to lb_policy llm, not to llm_route.
		if tc.wantAnswersOff && strings.Index(cf, "index_answers") < strings.Index(cf, "lb_policy llm") {
			t.Errorf("index_answers outside lb_policy llm:\n%s", cf)
		}
	}
}
