package anthropic

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestErrorType(t *testing.T) {
	for status, want := range map[int]string{
		400: "invalid_request_error",
		401: "authentication_error",
		403: "permission_error",
		404: "not_found_error",
		405: "invalid_request_error",
		413: "request_too_large",
		429: "rate_limit_error",
		500: "api_error",
		502: "api_error",
		503: "overloaded_error",
		529: "overloaded_error",
	} {
		assert.Equal(t, want, ErrorType(status), "status %d", status)
	}
}

func TestNewErrorShape(t *testing.T) {
	b, err := json.Marshal(NewError(429, "slow down"))
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, string(b))
}
