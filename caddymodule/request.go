package caddymodule

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/llmroute/caddy-llmroute/policies"
)

// hasBody reports whether r carries a body: every POST, and any request
// with a Content-Length or a chunked body. The body checks (type, size,
// encoding) apply to all of them, whatever the method.
func hasBody(r *http.Request) bool {
	return r.Method == http.MethodPost || r.ContentLength != 0 || len(r.TransferEncoding) > 0
}

// jsonMediaType reports whether a Content-Type names JSON:
// application/json or a +json type, with any parameters. The common
// spelling is answered without mime.ParseMediaType, which allocates its
// parameter map on every call.
func jsonMediaType(ct string) bool {
	if ct == "application/json" {
		return true
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// readRequest checks the content type, reads the bounded body once
// (decoding its Content-Encoding) and parses it into the request's model,
// stream flags and prefix keys. It returns the body and the buffer it lies
// in (body.go; nil for a decoded body), which holds the request's hold.
func (h *LLMRoute) readRequest(r *http.Request) (*policies.Request, *bodyBuf, []byte, apiError, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if !jsonMediaType(ct) {
			return nil, nil, nil, errContentType, false
		}
	} else if r.ContentLength != 0 {
		return nil, nil, nil, errContentType, false
	}
	if r.ContentLength > h.MaxBodyBytes {
		return nil, nil, nil, errTooLarge, false
	}
	bb, body, err := readBody(io.LimitReader(r.Body, h.MaxBodyBytes+1), r.ContentLength, h.MaxBodyBytes)
	switch {
	case errors.Is(err, errBodyTooLarge):
		return nil, nil, nil, errTooLarge, false
	case err != nil:
		return nil, nil, nil, errBodyRead, false
	}
	if ce := r.Header.Get("Content-Encoding"); ce != "" {
		dec, apiErr := decodeBody(ce, body, h.MaxBodyBytes)
		if apiErr.status != 0 {
			bb.drop()
			return nil, nil, nil, apiErr, false
		}
		if len(dec) == 0 || len(body) == 0 || &dec[0] != &body[0] {
			bb.drop() // the decoded body lies elsewhere
			bb, body = nil, dec
		}
	}
	req, err := policies.Parse(r.URL.Path, body, h.parseCfg)
	if err != nil {
		bb.drop()
	}
	switch {
	case errors.Is(err, policies.ErrMissingModel):
		return nil, nil, nil, errNoModel, false
	case err != nil:
		return nil, nil, nil, errMalformed, false
	}
	return req, bb, body, apiError{}, true
}

// withIncludeUsage returns body with stream_options.include_usage set; the
// caller asks only for a body without stream_options of its own
// (policies.Request.HasStreamOptions). When body lies in bb with the room
// kept before it, the field is inserted in place (only what precedes the
// object's first key moves); otherwise the body is copied once.
func withIncludeUsage(bb *bodyBuf, body []byte) ([]byte, bool) {
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return nil, false
	}
	ins := includeUsageField
	if rest := bytes.TrimLeft(body[i+1:], " \t\r\n"); len(rest) > 0 && rest[0] == '}' {
		ins = ins[:len(ins)-1] // an empty object: no comma
	}
	if bb != nil && bb.off >= len(ins) && len(body) > 0 && &body[0] == &bb.b[bb.off] {
		start := bb.off - len(ins)
		copy(bb.b[start:], body[:i+1])
		copy(bb.b[start+i+1:], ins)
		bb.off = start
		return bb.b[start : start+len(ins)+len(body)], true
	}
	out := make([]byte, 0, len(body)+len(ins))
	out = append(out, body[:i+1]...)
	out = append(out, ins...)
	out = append(out, body[i+1:]...)
	return out, true
}

// setContentLength makes h's Content-Length n. The client's header
// usually says so already (the body was read to its length), and then
// nothing is allocated; otherwise its one value is replaced in place, or
// set.
func setContentLength(h http.Header, n int64) {
	var buf [20]byte
	s := strconv.AppendInt(buf[:0], n, 10)
	vs := h["Content-Length"]
	switch {
	case len(vs) == 1 && vs[0] == string(s):
	case len(vs) == 1:
		vs[0] = string(s)
	default:
		h["Content-Length"] = []string{string(s)}
	}
}
