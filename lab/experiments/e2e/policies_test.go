package e2e

import "testing"

func TestPoliciesNamed(t *testing.T) {
	got, err := PoliciesNamed([]string{"prefix_load homes_directory", "round_robin"})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "prefix_load homes_directory" || !got[0].SharedHomes || got[1].Strategy != "round_robin" {
		t.Fatalf("got %+v", got)
	}
	if _, err := PoliciesNamed([]string{"round_robin", "fastest"}); err == nil {
		t.Fatal("an unknown name was accepted")
	}
}
