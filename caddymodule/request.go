package caddymodule

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/llmroute/caddy-llmroute/policies"
)

// hasBody reports whether r carries a body: every POST, and any request
// with a Content-Length or a chunked body. The body checks (type, size,
// encoding) apply to all of them, whatever the method.
func hasBody(r *http.Request) bool {
	return r.Method == http.MethodPost || r.ContentLength != 0 || len(r.TransferEncoding) > 0
}

// readRequest checks the content type, reads the bounded body once
// (decoding its Content-Encoding) and parses it into the request's model,
// stream flags and prefix keys.
func (h *LLMRoute) readRequest(r *http.Request) (*policies.Request, []byte, apiError, bool) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, nil, errContentType, false
		}
	} else if r.ContentLength != 0 {
		return nil, nil, errContentType, false
	}
	if r.ContentLength > h.MaxBodyBytes {
		return nil, nil, errTooLarge, false
	}
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		// + MinRead: ReadFrom wants MinRead free bytes before every read,
		// including the one that sees EOF; without them the buffer is
		// reallocated at twice the size once the body is in.
		buf.Grow(int(r.ContentLength) + bytes.MinRead)
	}
	n, err := buf.ReadFrom(io.LimitReader(r.Body, h.MaxBodyBytes+1))
	if err != nil {
		return nil, nil, errBodyRead, false
	}
	if n > h.MaxBodyBytes {
		return nil, nil, errTooLarge, false
	}
	body := buf.Bytes()
	if ce := r.Header.Get("Content-Encoding"); ce != "" {
		var apiErr apiError
		if body, apiErr = decodeBody(ce, body, h.MaxBodyBytes); apiErr.status != 0 {
			return nil, nil, apiErr, false
		}
	}
	req, err := policies.Parse(r.URL.Path, body, h.parseCfg)
	switch {
	case errors.Is(err, policies.ErrMissingModel):
		return nil, nil, errNoModel, false
	case err != nil:
		return nil, nil, errMalformed, false
	}
	return req, body, apiError{}, true
}

// withIncludeUsage returns body with stream_options.include_usage set, when
// the body has no stream_options of its own. It copies the body once.
func withIncludeUsage(body []byte) ([]byte, bool) {
	if bytes.Contains(body, []byte(`"stream_options"`)) {
		return nil, false
	}
	i := bytes.IndexByte(body, '{')
	if i < 0 {
		return nil, false
	}
	const ins = `"stream_options":{"include_usage":true},`
	rest := bytes.TrimLeft(body[i+1:], " \t\r\n")
	out := make([]byte, 0, len(body)+len(ins))
	out = append(out, body[:i+1]...)
	if len(rest) > 0 && rest[0] == '}' {
		out = append(out, ins[:len(ins)-1]...)
	} else {
		out = append(out, ins...)
	}
	out = append(out, body[i+1:]...)
	return out, true
}
