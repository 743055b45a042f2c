package sse

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestReader(t *testing.T) {
	long := strings.Repeat("x", 100<<10) // longer than the bufio buffer
	for _, tc := range []struct {
		name    string
		body    string
		max     int // 0: default
		want    []string
		wantErr error
	}{
		{name: "whole stream", body: "data: {\"a\":1}\n\ndata: [DONE]\n\n", want: []string{`{"a":1}`, Done}, wantErr: io.EOF},
		{name: "crlf and no space", body: "data:{\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n", want: []string{`{"a":1}`, Done}, wantErr: io.EOF},
		{name: "other fields skipped", body: ": keep-alive\nevent: chunk\nid: 7\ndata: x\n\nretry: 10\n", want: []string{"x"}, wantErr: io.EOF},
		{name: "cut inside a line", body: "data: x\n\ndata: {\"cho", want: []string{"x"}, wantErr: ErrPartialLine},
		{name: "cut after a whole line", body: "data: x\n", want: []string{"x"}, wantErr: io.EOF},
		{name: "empty body", body: "", wantErr: io.EOF},
		{name: "not sse", body: `{"object":"chat.completion"}`, wantErr: ErrPartialLine},
		{name: "empty data", body: "data:\n", want: []string{""}, wantErr: io.EOF},
		{name: "line longer than the buffer", body: "data: " + long + "\ndata: y\n", want: []string{long, "y"}, wantErr: io.EOF},
		{name: "line over the limit", body: "data: a\ndata: " + long + "\n", max: 1 << 10, want: []string{"a"}, wantErr: bufio.ErrTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One byte per read: lines split across reads must come back whole.
			r := NewReader(iotest.OneByteReader(strings.NewReader(tc.body)))
			if tc.max > 0 {
				r.MaxLine = tc.max
			}
			var got []string
			var err error
			for range 100 {
				var p []byte
				if p, err = r.Next(); err != nil {
					break
				}
				got = append(got, string(p))
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Fatalf("payloads %q, want %q", short(got), short(tc.want))
			}
			if _, again := r.Next(); !errors.Is(again, tc.wantErr) {
				t.Fatalf("a second call after the end returned %v", again)
			}
		})
	}
}

func TestReaderPassesReadErrors(t *testing.T) {
	for _, boom := range []error{errors.New("connection reset"), io.ErrUnexpectedEOF} {
		// The error comes in the middle of a line, as when a body is
		// shorter than its Content-Length.
		r := NewReader(io.MultiReader(strings.NewReader("data: a\ndata: {\"cho"), iotest.ErrReader(boom)))
		if p, err := r.Next(); err != nil || string(p) != "a" {
			t.Fatalf("first payload %q, %v", p, err)
		}
		if _, err := r.Next(); err != boom {
			t.Fatalf("error %v, want %v as it is", err, boom)
		}
	}
}

func TestIsDone(t *testing.T) {
	for in, want := range map[string]bool{"[DONE]": true, "[DONE] ": false, `{"done":true}`: false, "": false} {
		if IsDone([]byte(in)) != want {
			t.Errorf("IsDone(%q) = %v", in, !want)
		}
	}
}

func short(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		if len(x) > 20 {
			x = x[:20] + "..."
		}
		out[i] = x
	}
	return out
}
