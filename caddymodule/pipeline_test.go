package caddymodule

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
)

// TestPipelinedPosts writes three HTTP/1.1 POSTs in one TCP write and
// reads three answers, in order, each to its own request: the body reader
// takes exactly its request's Content-Length and leaves the next request
// where the server reads it. Bodies of every size class run (under and
// over pooledBodyMin), streamed and not.
func TestPipelinedPosts(t *testing.T) {
	f := newFake(t)
	r := startRouter(t, fmt.Sprintf(`
	llm_route {
		api_keys sk-pipe
	}
	reverse_proxy %s {
		lb_policy llm
	}`, f.addr))
	answered := 0
	for _, size := range []int{10, 3000} {
		for _, stream := range []bool{false, true} {
			var wire strings.Builder
			for i := range 3 {
				body := chatBody(strings.Repeat("p", size), fmt.Sprintf("pipelined %d", i), stream)
				fmt.Fprintf(&wire, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk-pipe\r\n"+
					"Content-Type: application/json\r\nX-Request-Id: pipe-%d-%v-%d\r\nContent-Length: %d\r\n\r\n%s", size, stream, i, len(body), body)
			}
			conn, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", r.port))
			require.NoError(t, err)
			require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
			_, err = io.WriteString(conn, wire.String()) // one write
			require.NoError(t, err)
			br := bufio.NewReader(conn)
			for i := range 3 {
				resp, err := http.ReadResponse(br, nil)
				require.NoError(t, err, "answer %d of 3 (size %d, stream %v)", i+1, size, stream)
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode, "answer %d: %s", i+1, b)
				answered++
			}
			conn.Close()
			for i := range 3 {
				assert.Equal(t, 1, f.count(fmt.Sprintf("pipe-%d-%v-%d", size, stream, i)), "request %d reached the replica once", i)
			}
		}
	}
	assert.Equal(t, 12, answered)
}
