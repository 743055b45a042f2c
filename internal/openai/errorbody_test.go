package openai

import (
	"encoding/json"
	"testing"
)

func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"error":{"message":"m","type":"t","param":null,"code":"queue_full"}}`, "queue_full"},
		{`{"error":{"message":"m","type":"t","param":null,"code":null}}`, "null"},
		{`{"error":{"message":"m","type":"t","code":429}}`, "null"},
		{`{"error":{"message":"","type":"t","code":"x"}}`, ""},
		{`{"error":{"message":"m","code":"x"}}`, ""},
		{`{"detail":"not found"}`, ""},
		{`upstream connect error`, ""},
	} {
		if got := ErrorCode([]byte(tc.body)); got != tc.want {
			t.Errorf("ErrorCode(%s) = %q, want %q", tc.body, got, tc.want)
		}
	}
}

func TestNewError(t *testing.T) {
	for _, tc := range []struct {
		code, want string
	}{
		{"fake_429", `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"fake_429"}}`},
		{"", `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":null}}`},
	} {
		b, err := json.Marshal(NewError("slow down", "rate_limit_error", tc.code))
		if err != nil || string(b) != tc.want {
			t.Fatalf("NewError encodes %s (%v), want %s", b, err, tc.want)
		}
		want := tc.code
		if want == "" {
			want = "null"
		}
		if got := ErrorCode(b); got != want {
			t.Fatalf("ErrorCode of NewError = %q, want %q", got, want)
		}
	}
}
