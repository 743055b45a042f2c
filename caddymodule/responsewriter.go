package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// routeWriter watches the response reverse_proxy relays to the client:
// whether and when the first byte left, with what status, and (through the
// usage sniffer) the cached tokens the engine reported. It never buffers or
// delays a write; Flush and Unwrap pass through so SSE is flushed as Caddy
// decides.
type routeWriter struct {
	*caddyhttp.ResponseWriterWrapper
	rc          *routeCtx
	replicaHdr  string
	status      int
	wroteHeader bool
	bytes       int64
	firstByteAt time.Time
	sniff       *usageSniffer
	respIDs     *responseIDScanner // reads a /v1/responses answer's id

	// cut is set when the answer ended without its protocol's end and
	// the handler aborts the connection (answerCut).
	cut bool

	// wrapper is what ResponseWriterWrapper points at (exchange.writer):
	// one allocation for both.
	wrapper caddyhttp.ResponseWriterWrapper
}

// firstBytes marks the answer started: the request's routing context
// learns it (the body is let go, the attempt's prefill ends) and the
// time to first byte is observed.
func (w *routeWriter) firstBytes() {
	if w.rc == nil {
		return
	}
	w.rc.firstByte()
	metricTTFB.Observe(w.firstByteAt.Sub(w.rc.started).Seconds())
}

func (w *routeWriter) WriteHeader(status int) {
	if w.wroteHeader {
		w.ResponseWriterWrapper.WriteHeader(status)
		return
	}
	if status >= 100 && status < 200 {
		w.ResponseWriterWrapper.WriteHeader(status)
		return
	}
	w.wroteHeader = true
	w.status = status
	w.rc.answered(status)
	if w.replicaHdr != "" {
		if a := w.rc.current(); a != nil {
			w.Header().Set(w.replicaHdr, a.rep.addr)
		}
	}
	if w.sniff != nil {
		w.sniff.start(w.Header().Get("Content-Type"))
		w.startAnswer(status)
		if status/100 == 2 && w.rc.req != nil {
			w.sniff.end.startEnd(w.rc.req.Endpoint, w.sniff.sse, w.sniff.json, w.Header().Get("Content-Encoding"))
		}
	}
	w.ResponseWriterWrapper.WriteHeader(status)
}

func (w *routeWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.firstByteAt.IsZero() && len(p) > 0 {
		w.firstByteAt = time.Now()
		w.firstBytes()
	}
	if w.respIDs != nil && !w.respIDs.done {
		if w.respIDs.observe(p); w.respIDs.id != "" && w.status < 300 {
			shareResponseID(w.rc, w.respIDs.id) // sharedpins.go
		}
	}
	out := p
	if w.sniff != nil {
		out = w.sniff.observe(p)
		if len(out) == 0 && len(p) > 0 {
			// The whole write was a usage chunk the client did not ask for.
			return len(p), nil
		}
	}
	n, err := w.ResponseWriterWrapper.Write(out)
	w.bytes += int64(n)
	if err == nil && n == len(out) {
		n = len(p)
	}
	return n, err
}

// answerCut reports whether a successful answer, now relayed, lacked its
// protocol's end (answerend.go): a replica cut it where HTTP framing
// could not tell.
func (w *routeWriter) answerCut() bool {
	if w.sniff == nil || w.status/100 != 2 || w.status == http.StatusNoContent {
		return false
	}
	if len(w.sniff.line) > 0 {
		// A last line without its line break still counts.
		w.sniff.end.sseLine(bytes.TrimRight(w.sniff.line, "\r\n"))
	}
	return w.sniff.end.cut()
}

// ReadFrom must go through Write so that nothing bypasses the watch.
func (w *routeWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(writerOnly{w}, r)
}

type writerOnly struct{ io.Writer }

// Interface guards
var (
	_ http.ResponseWriter = (*routeWriter)(nil)
	_ io.ReaderFrom       = (*routeWriter)(nil)
)
