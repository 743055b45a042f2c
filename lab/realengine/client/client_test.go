package client

import (
	"math"
	"strings"
	"testing"
)

func TestPlanShapes(t *testing.T) {
	c := WorkloadConfig{Name: SharedPrefix, Groups: 4, PerGroup: 3, SystemChars: 300, Rate: 2, Seed: 5}
	a, err := Plan(c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Plan(c)
	if len(a) != 12 {
		t.Fatalf("%d requests", len(a))
	}
	perGroup := map[int]int{}
	systems := map[int]string{}
	for i, r := range a {
		if r.Index != i || r.System != b[i].System || r.User != b[i].User || r.At != b[i].At {
			t.Fatal("plan is not deterministic")
		}
		if i > 0 && r.At < a[i-1].At {
			t.Fatal("arrivals not sorted")
		}
		if len(r.System) != 300 {
			t.Fatalf("system prompt is %d chars", len(r.System))
		}
		perGroup[r.Group]++
		if s, ok := systems[r.Group]; ok && s != r.System {
			t.Fatal("a group has two system prompts")
		}
		systems[r.Group] = r.System
	}
	for g := 0; g < 4; g++ {
		if perGroup[g] != 3 {
			t.Fatalf("group %d has %d requests", g, perGroup[g])
		}
	}
	// Different groups differ within their first four characters, so they
	// share no 16-token block.
	for g := 0; g < 4; g++ {
		for h := g + 1; h < 4; h++ {
			if systems[g][:4] == systems[h][:4] {
				t.Fatalf("groups %d and %d share a 4-character prefix", g, h)
			}
		}
	}

	c.Name = NoSharedPrefix
	u, err := Plan(c)
	if err != nil || len(u) != 12 {
		t.Fatalf("no_shared_prefix: %d requests (%v)", len(u), err)
	}
	seen := map[string]bool{}
	for _, r := range u {
		if r.Group != -1 || seen[r.System[:4]] {
			t.Fatalf("no_shared_prefix request shares a system prompt prefix: group %d", r.Group)
		}
		seen[r.System[:4]] = true
		if !strings.HasSuffix(r.User, "?") {
			t.Fatal("question without question mark")
		}
	}
	if _, err := Plan(WorkloadConfig{Name: "nope", Groups: 1, PerGroup: 1, SystemChars: 1, Rate: 1}); err == nil {
		t.Fatal("unknown workload accepted")
	}
}

func TestClassifyAndSummarize(t *testing.T) {
	ok := func(i, g int, at float64, rep string, cached, busy int) Result {
		return Result{Index: i, Group: g, SentAtMs: at, E2EMs: 100, Replica: rep, Complete: true, Status: 200,
			TTFTMs: 50, PromptTokens: 100, CachedTokens: cached, BusyReuse: busy}
	}
	rs := []Result{
		ok(0, 0, 0, "a", 0, 0),      // first
		ok(1, 0, 50, "a", 0, 0),     // concurrent: #0 still running on a
		ok(2, 0, 500, "a", 90, 0),   // hit
		ok(3, 0, 700, "b", 0, 0),    // routed elsewhere
		ok(4, 0, 900, "a", 0, 0),    // evicted
		ok(5, 1, 1000, "b", 0, 0),   // first of group 1
		ok(6, 1, 1010, "b", 0, 100), // concurrent (a busy slot held it)
		{Index: 7, Group: 1, Status: 503, TTFTMs: -1},
	}
	got := Classify(rs)
	want := map[string]int{"first": 2, "concurrent": 2, "hit": 1, "routed_elsewhere": 1, "evicted": 1}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("Classify = %v, want %v", got, want)
		}
	}
	s := Summarize(rs)
	if s.Requests != 8 || s.Completed != 7 || s.Incomplete != 1 || s.Non200 != 1 {
		t.Fatalf("counts wrong: %+v", s)
	}
	if math.Abs(s.CachedTokenRate-90.0/700) > 1e-9 {
		t.Fatalf("cached_token_rate %v", s.CachedTokenRate)
	}
	if s.GroupHomes["a"] != 1 || s.GroupHomes["b"] != 1 || s.GroupSplit != 1.5 {
		t.Fatalf("group homes %v split %v", s.GroupHomes, s.GroupSplit)
	}
}

func TestMultiTurnPlanAndAnswerReuse(t *testing.T) {
	plan, err := Plan(WorkloadConfig{Name: MultiTurn, Groups: 3, PerGroup: 4, SystemChars: 200, Rate: 1, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	last := map[int]int{}
	for i, r := range plan {
		p, seen := last[r.Group]
		switch {
		case !seen && (r.Prev != -1 || r.Turn != 0):
			t.Fatalf("request %d opens conversation %d with prev %d turn %d", i, r.Group, r.Prev, r.Turn)
		case seen && (r.Prev != p || r.Turn != plan[p].Turn+1 || plan[p].System != r.System):
			t.Fatalf("request %d: prev %d turn %d, want prev %d turn %d", i, r.Prev, r.Turn, p, plan[p].Turn+1)
		}
		last[r.Group] = i
	}
	if len(last) != 3 {
		t.Fatalf("%d conversations", len(last))
	}
	r := Request{System: "s", User: "q3", History: []Exchange{{"q1", "a1"}, {"q2", "a2"}}}
	ms := r.Messages()
	if len(ms) != 6 || ms[0] != (Message{"system", "s"}) || ms[2] != (Message{"assistant", "a1"}) || ms[5] != (Message{"user", "q3"}) {
		t.Fatalf("messages %+v", ms)
	}
	if ms := (Request{User: "q"}).Messages(); len(ms) != 1 || ms[0] != (Message{"user", "q"}) {
		t.Fatalf("no system prompt: messages %+v", ms)
	}

	ok := func(i, prev, prompt, completion, lcp int) Result {
		return Result{Index: i, Prev: prev, PromptTokens: prompt, CompletionTokens: completion, EngineLCP: lcp, Complete: true}
	}
	rs := []Result{
		ok(0, -1, 100, 8, 0),
		ok(1, 0, 130, 8, 105), // reused 5 of the 8 answer tokens
		ok(2, 1, 160, 8, 140), // all 8 (capped at the answer)
		ok(3, -1, 100, 8, 0),  //
		ok(4, 3, 130, 8, 60),  // slot did not hold turn 3: elsewhere
		{Index: 5, Prev: 4},   // incomplete: not counted
	}
	a := AnswerReuseOf(rs)
	if a == nil || a.Turns != 2 || a.Elsewhere != 1 || a.AnswerTokens != 16 || a.Reused != 13 || a.Rate != 13.0/16 {
		t.Fatalf("answer reuse %+v", a)
	}
	if AnswerReuseOf(rs[:1]) != nil {
		t.Fatal("answer reuse without later turns")
	}
	var sum AnswerReuse
	sum.Add(a)
	sum.Add(a)
	if sum.Turns != 4 || sum.Reused != 26 || sum.Rate != 13.0/16 {
		t.Fatalf("pooled %+v", sum)
	}
}
