package openai

// CompletionObject is the object name of a whole (not streamed) answer.
const CompletionObject = "chat.completion"

// Completion is a whole chat completion answer.
type Completion struct {
	// ID, Object (CompletionObject), Created (Unix seconds) and Model
	// name the answer.
	ID      string             `json:"id,omitempty"`
	Object  string             `json:"object,omitempty"`
	Created int64              `json:"created,omitempty"`
	Model   string             `json:"model,omitempty"`
	Choices []CompletionChoice `json:"choices"`
	Usage   *Usage             `json:"usage,omitempty"`
}

// CompletionChoice is one choice of a whole answer.
type CompletionChoice struct {
	// Index is the choice's position (0 with one choice).
	Index int `json:"index"`
	// Message is the answer.
	Message Message `json:"message"`
	// FinishReason says why generation stopped ("stop", "length").
	FinishReason string `json:"finish_reason"`
}

// Message is a chat message.
type Message struct {
	// Role is "system", "user" or "assistant".
	Role string `json:"role"`
	// Content is the message text.
	Content string `json:"content"`
}
