package main

import "testing"

func TestShellWords(t *testing.T) {
	got := shellWords([]string{"-e2e-policies", "round_robin,prefix_load homes_directory", "-x", "it's", "", "e2e"})
	want := `-e2e-policies 'round_robin,prefix_load homes_directory' -x 'it'\''s' '' e2e`
	if got != want {
		t.Fatalf("shellWords = %s, want %s", got, want)
	}
}
