package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmroute/caddy-llmroute/internal/testrig/fakereplica"
)

// TestPipelinedPostsOneWrite writes three HTTP/1.1 POSTs in one TCP write
// through the binary and reads three answers in order, each its own
// request's: the request body is read to its Content-Length and no
// further, so the next request stays for the server to read. It runs
// with the first request refused before its body is read (401) too,
// with bodies over pooledBodyMin and with chunked bodies.
func TestPipelinedPostsOneWrite(t *testing.T) {
	e := newEnv(t, 2, nil, baseConfig())
	cases := []struct {
		name    string
		keys    [3]string
		streams [3]bool
		size    int
		chunked bool
		want    [3]int
	}{
		{"three served", [3]string{apiKey, apiKey, apiKey}, [3]bool{false, true, false}, 20, false, [3]int{200, 200, 200}},
		{"large bodies", [3]string{apiKey, apiKey, apiKey}, [3]bool{true, false, true}, 4000, false, [3]int{200, 200, 200}},
		{"chunked bodies", [3]string{apiKey, apiKey, apiKey}, [3]bool{false, true, false}, 2000, true, [3]int{200, 200, 200}},
		{"the first refused before its body is read", [3]string{"sk-wrong", apiKey, apiKey}, [3]bool{false, false, true}, 20, false, [3]int{401, 200, 200}},
	}
	answered := 0
	for _, c := range cases {
		var wire strings.Builder
		var ids [3]string
		for i := range 3 {
			ids[i] = newID(t)
			body := chatBody(c.streams[i], false, strings.Repeat("q", c.size)+fmt.Sprint(i))
			fmt.Fprintf(&wire, "POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n%s: %s\r\n",
				strings.TrimPrefix(e.url, "http://"), c.keys[i], fakereplica.HeaderRequestID, ids[i])
			if c.chunked {
				half := len(body) / 2
				fmt.Fprintf(&wire, "Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", half, body[:half], len(body)-half, body[half:])
			} else {
				fmt.Fprintf(&wire, "Content-Length: %d\r\n\r\n%s", len(body), body)
			}
		}
		conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		require.NoError(t, err)
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(conn, wire.String())
		require.NoError(t, err)
		br := bufio.NewReader(conn)
		for i := range 3 {
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err, "%s: answer %d of 3", c.name, i+1)
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err, "%s: answer %d", c.name, i+1)
			require.Equal(t, c.want[i], resp.StatusCode, "%s: answer %d: %s", c.name, i+1, b)
			answered++
		}
		conn.Close()
		for i := range 3 {
			want := 0
			if c.want[i] == 200 {
				want = 1
			}
			assert.Len(t, e.tracker.Receipts(ids[i]), want, "%s: request %d reached a replica", c.name, i+1)
		}
	}
	assert.Equal(t, 3*len(cases), answered)
}
