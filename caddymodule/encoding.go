package caddymodule

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// decodeBody returns body decoded from its Content-Encoding, which must be
// one of gzip, deflate (zlib, as HTTP means it), zstd or identity. The
// decoded body is bounded by limit like a plain one (a decompression bomb
// gets 413); a body that does not decode gets 400, and an encoding llm_route
// cannot read 415: a body it could not read is never routed. klauspost's
// zstd is the decoder Caddy's own encode module builds on.
func decodeBody(encoding string, body []byte, limit int64) ([]byte, apiError) {
	var zr io.Reader
	var err error
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "identity":
		return body, apiError{}
	case "gzip", "x-gzip":
		zr, err = gzip.NewReader(bytes.NewReader(body))
	case "deflate":
		zr, err = zlib.NewReader(bytes.NewReader(body))
	case "zstd":
		var d *zstd.Decoder
		d, err = zstd.NewReader(bytes.NewReader(body), zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(uint64(limit)+1<<20))
		if err == nil {
			defer d.Close()
			zr = d
		}
	default:
		return nil, errEncoding
	}
	if err != nil {
		return nil, errDecode
	}
	var out bytes.Buffer
	n, err := out.ReadFrom(io.LimitReader(zr, limit+1))
	switch {
	case n > limit:
		return nil, errTooLarge
	case err != nil:
		return nil, errDecode
	}
	return out.Bytes(), apiError{}
}
