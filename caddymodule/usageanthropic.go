package caddymodule

// The one-pass reader of an answer's usage in Anthropic's shape: the usage
// of message_start's message and of message_delta, which every streamed
// /v1/messages answer carries (twice) and which scanUsage declines.

import (
	"encoding/json"

	"github.com/llmroute/caddy-llmroute/internal/jsonscan"
)

// The fields of usageMessage and of anthropicUsage, as encoding/json
// matches them.
var (
	usageMessageFields   = []string{"usage"}
	anthropicUsageFields = []string{"input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"}
)

// anthropicStore holds what scanAnthropicUsage points a usageDoc's fields
// at, so that reading a doc allocates nothing.
type anthropicStore struct {
	usage                       usageCounts
	message                     usageMessage
	messageUsage                anthropicUsage
	cacheRead, messageCacheRead int
	choices                     []json.RawMessage
}

// someChoice is the choices a doc with any is read as: apply asks only
// whether there are some.
var someChoice = []json.RawMessage{nil}

// scanAnthropicUsage reads doc into u exactly as encoding/json would
// decode it, for a doc with Anthropic's usage shape (type, message,
// usage, choices, any other field but usageDoc's), pointing u's fields into
// store; it declines (false) anything else: the other APIs' fields
// (response, timings, tokens_cached, tokens_evaluated, the details
// objects), duplicate or case-folded names, a count that is not a plain
// integer, a type that is not a string, anything that would not decode.
func scanAnthropicUsage(doc []byte, u *usageDoc, store *anthropicStore) bool {
	s := jsonscan.New(doc)
	ok := s.Object(usageDocFields, func(i int) bool {
		switch usageDocFields[i] {
		case "choices":
			if s.Lit("null") {
				return true
			}
			store.choices = someChoice[:0]
			u.Choices = &store.choices
			return s.Array(func() bool {
				store.choices = someChoice
				_, ok := s.Skip()
				return ok
			})
		case "usage":
			if s.Lit("null") {
				return true
			}
			u.Usage = &store.usage
			return scanAnthropicCounts(&s, &store.usage, &store.cacheRead)
		case "type":
			if s.Lit("null") {
				return true
			}
			lit, _, ok := s.String()
			if len(lit) > 2 {
				u.Type = "?" // apply asks only whether it is empty
			}
			return ok
		case "message":
			if s.Lit("null") {
				return true
			}
			u.Message = &store.message
			return s.Object(usageMessageFields, func(int) bool {
				if s.Lit("null") {
					return true
				}
				store.message.Usage = &store.messageUsage
				return scanAnthropicFields(&s, &store.messageUsage, &store.messageCacheRead)
			})
		}
		return false // another API's usage: left to encoding/json
	})
	return ok && s.End()
}

// scanAnthropicCounts reads a usage object into c; cacheRead is where
// cache_read_input_tokens points when present. The details objects
// decline.
func scanAnthropicCounts(s *jsonscan.Scanner, c *usageCounts, cacheRead *int) bool {
	// The integer counts, at their names' places in usageFields; the
	// details objects (nil here) decline.
	counts := [...]*int{&c.PromptTokens, &c.CompletionTokens, &c.TotalTokens, nil, nil,
		&c.InputTokens, nil, &c.CacheCreationInputTokens, &c.OutputTokens}
	return s.Object(usageFields, func(i int) bool {
		switch {
		case usageFields[i] == "cache_read_input_tokens":
			return scanCountPtr(s, &c.CacheReadInputTokens, cacheRead)
		case counts[i] == nil:
			return false
		}
		return scanInt(s, counts[i])
	})
}

// scanAnthropicFields reads an anthropicUsage object (message_start's).
func scanAnthropicFields(s *jsonscan.Scanner, a *anthropicUsage, cacheRead *int) bool {
	return s.Object(anthropicUsageFields, func(i int) bool {
		switch i {
		case 0:
			return scanInt(s, &a.InputTokens)
		case 1:
			return scanCountPtr(s, &a.CacheReadInputTokens, cacheRead)
		}
		return scanInt(s, &a.CacheCreationInputTokens)
	})
}

// scanCountPtr reads a plain integer into store and points p at it; null
// leaves p nil.
func scanCountPtr(s *jsonscan.Scanner, p **int, store *int) bool {
	if s.Lit("null") {
		*p = nil
		return true
	}
	*p = store
	return scanInt(s, store)
}
