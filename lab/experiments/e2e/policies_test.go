package e2e

import (
	"testing"

	"github.com/llmroute/caddy-llmroute/policies"
)

func TestPoliciesNamed(t *testing.T) {
	got, err := PoliciesNamed([]string{"prefix_load homes_directory", "round_robin"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "prefix_load homes_directory" || !got[0].SharedHomes || got[1].Strategy != "round_robin" {
		t.Fatalf("got %+v", got)
	}
	got, err = PoliciesNamed([]string{"prefix_load peers none"})
	if err != nil || got[0].Sim.Peers != policies.PeersNone || got[0].Options[0] != "peers none" {
		t.Fatalf("cold rules: %+v %v", got, err)
	}
	if _, err := PoliciesNamed([]string{"round_robin", "fastest"}); err == nil {
		t.Fatal("an unknown name was accepted")
	}
}
