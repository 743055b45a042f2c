package simreplica

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFault(t *testing.T) {
	cases := []struct {
		spec string
		want Fault
	}{
		{"", NoFault},
		{"none", NoFault},
		{"429", Fault{Status: 429, RetryAfter: 3, CutAfter: -1}},
		{" 503 ", Fault{Status: 503, RetryAfter: 3, CutAfter: -1}},
		{"500", Fault{Status: 500, RetryAfter: 3, CutAfter: -1}},
		{"stall", Fault{Stall: 2 * time.Second, RetryAfter: 3, CutAfter: -1}},
		{"stall=150", Fault{Stall: 150 * time.Millisecond, RetryAfter: 3, CutAfter: -1}},
		{"cut-after=0", Fault{CutAfter: 0, RetryAfter: 3}},
		{"cut-after=4", Fault{CutAfter: 4, RetryAfter: 3}},
		{"slow=20", Fault{Slow: 20 * time.Millisecond, RetryAfter: 3, CutAfter: -1}},
		{"refuse", Fault{Refuse: true, RetryAfter: 3, CutAfter: -1}},
		{"Restart,slow=5", Fault{Restart: true, Slow: 5 * time.Millisecond, RetryAfter: 3, CutAfter: -1}},
	}
	for _, c := range cases {
		got, err := ParseFault(c.spec, 3, 2*time.Second)
		require.NoError(t, err, c.spec)
		want := c.want
		if want == NoFault {
			want.RetryAfter = 3
		}
		assert.Equal(t, want, got, c.spec)
		// String round-trips.
		again, err := ParseFault(got.String(), 3, 2*time.Second)
		require.NoError(t, err)
		assert.Equal(t, got, again, c.spec)
	}
	assert.True(t, NoFault.IsZero())
	assert.Equal(t, "", NoFault.String())

	for _, spec := range []string{"404", "boom", "cut-after", "cut-after=x", "slow=-1", "stall=abc"} {
		_, err := ParseFault(spec, 1, time.Second)
		assert.Error(t, err, spec)
	}
}

func TestRequestFaultHeaders(t *testing.T) {
	global := Fault{Status: 503, RetryAfter: 1, CutAfter: -1}
	r := httptest.NewRequest("POST", "/v1/completions", nil)
	f, err := requestFault(r, global, 1, time.Second)
	require.NoError(t, err)
	assert.Equal(t, global, f, "no header: the global fault")

	r.Header.Set(HeaderFault, "none")
	f, err = requestFault(r, global, 1, time.Second)
	require.NoError(t, err)
	assert.True(t, f.IsZero(), "none overrides the global fault")

	r.Header.Set(HeaderFault, "429")
	r.Header.Set(HeaderRetryAfter, "9")
	f, err = requestFault(r, global, 1, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 429, f.Status)
	assert.Equal(t, 9, f.RetryAfter)

	r.Header.Set(HeaderFault, "stall")
	r.Header.Set(HeaderStallMs, "25")
	f, err = requestFault(r, global, 1, time.Second)
	require.NoError(t, err)
	assert.Equal(t, 25*time.Millisecond, f.Stall)

	r.Header.Set(HeaderStallMs, "x")
	_, err = requestFault(r, global, 1, time.Second)
	assert.Error(t, err)
	r.Header.Del(HeaderStallMs)
	r.Header.Set(HeaderRetryAfter, "-1")
	_, err = requestFault(r, global, 1, time.Second)
	assert.Error(t, err)
}
