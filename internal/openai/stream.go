package openai

import (
	"encoding/json"
	"io"
	"time"

	"github.com/llmroute/caddy-llmroute/internal/sse"
)

// Stream is what a client saw of a streamed chat answer.
type Stream struct {
	// Done is set when the stream ended with data: [DONE].
	Done bool
	// Chunks counts the chunks that decoded.
	Chunks int
	// ContentChunks counts the choices, over all chunks, that carried
	// non-empty content (the tokens streamed, one per chunk for OpenAI
	// servers).
	ContentChunks int
	// FirstContent is when the first non-empty content arrived (zero if
	// none did): time to first token is FirstContent minus the send time.
	FirstContent time.Time
	// Finish is the last non-empty finish_reason.
	Finish string
	// Usage is the last usage seen; nil if none came.
	Usage *Usage
	// BadChunk is the first data payload that was not a JSON chunk.
	BadChunk error
	// Err is the read error that ended the stream: nil after [DONE] or
	// at a clean end of the body (which, without Done, is still a cut
	// stream); sse.ErrPartialLine when the body stopped inside a line.
	Err error
}

// ReadStream reads a chat completion stream up to data: [DONE] or the end
// of r, and reports what it carried. It does not read past [DONE]: a
// client that reuses its connection drains the body itself.
func ReadStream(r io.Reader) Stream {
	var s Stream
	sr := sse.NewReader(r)
	for {
		data, err := sr.Next()
		if err != nil {
			if err != io.EOF {
				s.Err = err
			}
			return s
		}
		if sse.IsDone(data) {
			s.Done = true
			return s
		}
		var c Chunk
		if err := json.Unmarshal(data, &c); err != nil {
			if s.BadChunk == nil {
				s.BadChunk = err
			}
			continue
		}
		s.Chunks++
		for _, ch := range c.Choices {
			if ch.Delta.Content != "" {
				if s.ContentChunks == 0 {
					s.FirstContent = time.Now()
				}
				s.ContentChunks++
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				s.Finish = *ch.FinishReason
			}
		}
		if c.Usage != nil {
			s.Usage = c.Usage
		}
	}
}
