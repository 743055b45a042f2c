package suite

import "testing"

func TestRatioOf(t *testing.T) {
	cell := map[string]SweepPoint{
		"round_robin":     {TTFTP99Ms: 200, TTFTP50Ms: 30, TokenHitRate: 0.3},
		"least_load":      {TTFTP99Ms: 250, TTFTP50Ms: 40, TokenHitRate: 0.3},
		"prefix_affinity": {TTFTP99Ms: 400, TTFTP50Ms: 20, TokenHitRate: 0.8},
		"oracle":          {TTFTP99Ms: 190, TTFTP50Ms: 25, TokenHitRate: 0.9},
		"prefix_load":     {TTFTP99Ms: 210, TTFTP50Ms: 24, TokenHitRate: 0.88, Agreement: 0.625, AgreementKeys: 48},
	}
	none := map[string]SweepPoint{"round_robin": {TTFTP99Ms: 100}, "least_load": {TTFTP99Ms: 100}, "prefix_load": {TTFTP99Ms: 100}}
	cases := []struct {
		name   string
		r      Ratio
		policy string
		cell   map[string]SweepPoint
		want   string
	}{
		{"tail over the better of round_robin and least_load", TailRatio, "prefix_load", cell, "1.05"},
		{"median over the best other policy", MedianRatio, "prefix_load", cell, "1.20"},
		{"median: a policy better than every other reads below 1", MedianRatio, "prefix_affinity", cell, "0.83"},
		{"hit over the better of prefix_affinity and oracle", HitRatio, "prefix_load", cell, "0.978"},
		{"hit with nothing to hit", HitRatio, "prefix_load", none, "-"},
		{"agreement", AgreementRatio, "prefix_load", cell, "0.62"},
		{"agreement without shared keys", AgreementRatio, "prefix_load", none, "-"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.r.Of(c.policy, c.cell[c.policy], c.cell); got != c.want {
				t.Errorf("%v.Of(%s) = %s, want %s", c.r, c.policy, got, c.want)
			}
		})
	}
}

func TestThousands(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want string
	}{
		{0, "0"}, {26.4, "26"}, {999.5, "1,000"}, {1024, "1,024"}, {102797.2, "102,797"}, {1234567, "1,234,567"}, {-16384, "-16,384"}, {-0.4, "0"},
	} {
		if got := Thousands(c.x); got != c.want {
			t.Errorf("Thousands(%g) = %s, want %s", c.x, got, c.want)
		}
	}
}
