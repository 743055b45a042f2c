package sse

import (
	"testing"
)

func TestTail(t *testing.T) {
	whole := "data: {\"choices\":[]}\n\n" + DoneEvent
	for _, tc := range []struct {
		name   string
		writes []string
		want   bool
	}{
		{name: "nothing", writes: nil, want: false},
		{name: "one write", writes: []string{whole}, want: true},
		{name: "done alone", writes: []string{DoneEvent}, want: true},
		{name: "split in the marker", writes: []string{"data: {}\n\ndata: [DO", "NE]\n", "\n"}, want: true},
		{name: "byte by byte", writes: bytesOf(whole), want: true},
		{name: "cut before the blank line", writes: []string{"data: {}\n\ndata: [DONE]\n"}, want: false},
		{name: "more after done", writes: []string{whole, "data: {}\n\n"}, want: false},
		{name: "json answer", writes: []string{`{"object":"chat.completion"}`}, want: false},
		{name: "short total", writes: []string{"[DONE]\n\n"}, want: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tl Tail
			for _, w := range tc.writes {
				if n, err := tl.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if got := tl.EndsWithDone(); got != tc.want {
				t.Fatalf("EndsWithDone = %v, want %v", got, tc.want)
			}
		})
	}
}

func bytesOf(s string) []string {
	out := make([]string, len(s))
	for i := range s {
		out[i] = s[i : i+1]
	}
	return out
}
