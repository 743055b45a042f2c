// Package sse is the client side of the server-sent event streams that
// OpenAI-compatible servers answer with (text/event-stream, one JSON chunk
// per "data:" line, ending with "data: [DONE]"): a reader of the data
// payloads for clients that look at every chunk, and Tail for load
// generators that only check how a stream ended.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Done is the payload of the event that ends an OpenAI stream.
const Done = "[DONE]"

// DoneEvent is that event as it appears on the wire.
const DoneEvent = "data: " + Done + "\n\n"

// ErrPartialLine is what Next returns when the body ended cleanly (io.EOF)
// inside a line: a stream cut mid-event. It wraps io.ErrUnexpectedEOF; a
// body that itself fails with io.ErrUnexpectedEOF (shorter than its
// Content-Length) comes back as that error, not as this one.
var ErrPartialLine = fmt.Errorf("sse: the body ended inside a line: %w", io.ErrUnexpectedEOF)

// MaxLine is the longest line a Reader accepts by default.
const MaxLine = 1 << 20

// Reader reads the payloads of the "data:" lines of a stream, one per call.
// It reads line by line, as every OpenAI-compatible server puts each event
// on one data line; a multi-line event comes back as one payload per line.
type Reader struct {
	br *bufio.Reader
	// MaxLine bounds a line's length (default MaxLine); a longer one ends
	// the stream with bufio.ErrTooLong.
	MaxLine int
	line    []byte
	err     error
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10), MaxLine: MaxLine}
}

// Next returns the payload of the next data line: what follows "data:",
// without surrounding white space (so the end of a stream is
// IsDone(payload)). Other lines (blank separators, comments, event: and
// id: fields) are skipped. The payload is valid until the next call.
//
// At the end of the body Next returns io.EOF when the last line was
// whole (ended with a newline), and ErrPartialLine when the body stopped
// inside a line, as a stream cut mid-event does (the partial line is not
// returned). Read errors come back as they are. Once Next returned an
// error it returns the same one.
func (r *Reader) Next() ([]byte, error) {
	for r.err == nil {
		line, err := r.readLine()
		if err != nil {
			r.err = err
			break
		}
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			return bytes.TrimSpace(data), nil
		}
	}
	return nil, r.err
}

// readLine returns the next whole line without its line ending.
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		part, err := r.br.ReadSlice('\n')
		if len(r.line)+len(part) > r.MaxLine {
			return nil, bufio.ErrTooLong
		}
		if err == nil {
			if len(r.line) == 0 {
				return bytes.TrimRight(part, "\r\n"), nil
			}
			r.line = append(r.line, part...)
			return bytes.TrimRight(r.line, "\r\n"), nil
		}
		r.line = append(r.line, part...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(r.line) > 0:
			return nil, ErrPartialLine
		default:
			return nil, err
		}
	}
}

// IsDone reports whether payload is the one that ends an OpenAI stream.
func IsDone(payload []byte) bool { return string(payload) == Done }
