package main

import (
	"strings"
	"testing"
)

// TestLLMTargetOptionalReaders proves what each llm target's name turns
// off in the Caddyfile it runs: the plain target asks for usage and
// indexes answers, _nousage only stops the usage, _lean stops both.
func TestLLMTargetOptionalReaders(t *testing.T) {
	for _, tc := range []struct {
		name           string
		wantStrategy   string
		wantUsage      bool
		wantAnswersOff bool
	}{
		{"llm_prefix_load", "prefix_load", true, false},
		{"llm_least_load_nousage", "least_load", false, false},
		{"llm_prefix_load_lean", "prefix_load", false, true},
	} {
		strategy, usage, answers := llmTarget(tc.name)
		if strategy != tc.wantStrategy {
			t.Errorf("%s: strategy %q, want %q", tc.name, strategy, tc.wantStrategy)
		}
		cf := llmCaddyfile("127.0.0.1:2019", "127.0.0.1:8080", []string{"127.0.0.1:9001"}, strategy, 64, usage, answers)
		if !strings.Contains(cf, "\t\t\tstrategy "+tc.wantStrategy+"\n") {
			t.Errorf("%s: no strategy %s in:\n%s", tc.name, tc.wantStrategy, cf)
		}
		if got := strings.Contains(cf, "\trequest_usage\n"); got != tc.wantUsage {
			t.Errorf("%s: request_usage present %v, want %v", tc.name, got, tc.wantUsage)
		}
		if got := strings.Contains(cf, "\tindex_answers off\n"); got != tc.wantAnswersOff {
			t.Errorf("%s: index_answers off present %v, want %v", tc.name, got, tc.wantAnswersOff)
		}
		// index_answers belongs to lb_policy llm, not to llm_route.
		if tc.wantAnswersOff && strings.Index(cf, "index_answers") < strings.Index(cf, "lb_policy llm") {
			t.Errorf("%s: index_answers outside lb_policy llm:\n%s", tc.name, cf)
		}
	}
}
