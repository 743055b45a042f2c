package workload

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/llmroute/caddy-llmroute/policies"
	"github.com/llmroute/caddy-llmroute/simengine"
)

// ChatPath is the endpoint every request is rendered for.
const ChatPath = "/v1/chat/completions"

// Segment is one message content with its tokens, computed once and shared
// by every request that repeats it (a system prompt, an earlier turn).
type Segment struct {
	Text   string
	Tokens []uint32
}

// NewSegment tokenizes text once.
func NewSegment(text string) *Segment {
	return &Segment{Text: text, Tokens: simengine.Tokenize(text)}
}

// Message is one chat message.
type Message struct {
	Role    string
	Content *Segment
}

// The replica's chat template (simreplica's parseChat): "<|role|>\n" +
// content + "\n" per message, then the generation prompt "<|assistant|>\n".
// Every piece boundary sits next to a newline, which the tokenizer always
// makes a token of its own, so tokenizing the pieces one by one gives the
// same ids as tokenizing the whole rendering (TestTemplateTokensPiecewise).
var (
	headerTokens = map[string][]uint32{}
	newline      = simengine.Tokenize("\n")
	genPrompt    = simengine.Tokenize("<|assistant|>\n")
)

func init() {
	for _, r := range []string{"system", "user", "assistant", "developer", "tool"} {
		headerTokens[r] = simengine.Tokenize("<|" + r + "|>\n")
	}
}

func header(role string) []uint32 {
	if t, ok := headerTokens[role]; ok {
		return t
	}
	return simengine.Tokenize("<|" + role + "|>\n")
}

// EngineText renders msgs with the replica's chat template.
func EngineText(msgs []Message) string {
	var b bytes.Buffer
	for _, m := range msgs {
		b.WriteString("<|" + m.Role + "|>\n" + m.Content.Text + "\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// Request is one chat request of a workload: its messages, its natural
// answer length and what the router derives from its body.
type Request struct {
	Session, Turn int
	Messages      []Message
	// OutputTokens is the answer length: the request asks for max_tokens
	// of it and the (fake) model stops there.
	OutputTokens int
	// PromptTokens is the length of the engine's prompt.
	PromptTokens int

	// Keys, PromptBytes and NoPrefix come from policies.Parse on the
	// request's JSON body, exactly as the Caddy module computes them.
	Keys        policies.Keys
	PromptBytes int
	NoPrefix    string
	// HashKey is the bounded_hash key: xxhash64 of the body's first
	// HashBytes bytes, as a load balancer hashing the leading bytes of the
	// request would compute it.
	HashKey uint64
}

// Tokens appends the engine prompt's tokens to dst[:0] and returns it.
func (r *Request) Tokens(dst []uint32) []uint32 {
	dst = dst[:0]
	for _, m := range r.Messages {
		dst = append(dst, header(m.Role)...)
		dst = append(dst, m.Content.Tokens...)
		dst = append(dst, newline...)
	}
	return append(dst, genPrompt...)
}

func (r *Request) countTokens() int {
	n := len(genPrompt)
	for _, m := range r.Messages {
		n += len(header(m.Role)) + len(m.Content.Tokens) + len(newline)
	}
	return n
}

// chatBody is the OpenAI chat request body, fields in the order the OpenAI
// SDKs send them.
type chatBody struct {
	Messages      []chatMessage  `json:"messages"`
	Model         string         `json:"model"`
	MaxTokens     int            `json:"max_tokens"`
	Stream        bool           `json:"stream"`
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Body renders the request as an OpenAI chat completions JSON body for
// model, streaming with usage.
func (r *Request) Body(model string) []byte {
	b := chatBody{Model: model, MaxTokens: r.OutputTokens, Stream: true, StreamOptions: &streamOptions{IncludeUsage: true}}
	b.Messages = make([]chatMessage, len(r.Messages))
	for i, m := range r.Messages {
		b.Messages[i] = chatMessage{Role: m.Role, Content: m.Content.Text}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&b); err != nil {
		panic(err) // strings and ints always encode
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// derive fills Keys, PromptBytes, NoPrefix, HashKey and PromptTokens from
// the rendered body.
func (r *Request) derive(model string, pc policies.ParseConfig, hashBytes int) error {
	body := r.Body(model)
	pr, err := policies.Parse(ChatPath, body, pc)
	if err != nil {
		return fmt.Errorf("workload: parse session %d turn %d: %w", r.Session, r.Turn, err)
	}
	r.Keys, r.PromptBytes, r.NoPrefix = pr.Keys, pr.PromptBytes, pr.NoPrefix
	r.HashKey = xxhash.Sum64(body[:min(hashBytes, len(body))])
	r.PromptTokens = r.countTokens()
	return nil
}
