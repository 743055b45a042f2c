package policies

import "strconv"

// The canonical rendering is what llmroute hashes into blocks: every part of
// the prompt in order, with role headers and terminators in the spirit of a
// chat template, so that two requests share rendered bytes exactly as far as
// they share a conversation. It need not match any engine's template byte
// for byte: it only has to be a deterministic, prefix-preserving function of
// the conversation. Each message is rendered as
//
//	<|role|>\n[<|name|>name\n][<|tool_call_id|>id\n]content[tool calls]\n<|end|>\n
//
// and array contents join their parts with "\n".

const endTag = "\n<|end|>\n"

// header writes "<|tag|>\n".
func header(w *sink, tag string) {
	w.WriteString("<|")
	w.WriteString(tag)
	w.WriteString("|>\n")
}

// field writes "<|tag|>value\n" when the value is present.
func field(w *sink, tag string, v *jsonText) {
	if v.kind == shapeAbsent {
		return
	}
	w.WriteString("<|")
	w.WriteString(tag)
	w.WriteString("|>")
	v.render(w)
	w.WriteString("\n")
}

// renderContent writes a string content, or an array's parts joined by "\n".
func renderContent(w *sink, c *content) {
	switch c.kind {
	case shapeString:
		w.writeBodyText(c.text, c.lit, c.plain)
	case shapeArray:
		for i := range c.parts {
			if i > 0 {
				w.WriteString("\n")
			}
			renderPart(w, &c.parts[i])
		}
	}
}

// renderPart writes a text part's text alone (so that a single text part
// renders like a string content), and any other part as its type followed
// by whichever payload fields it has.
func renderPart(w *sink, p *contentPart) {
	switch t := p.Type.str(); t {
	case "text", "input_text", "output_text":
		p.Text.render(w)
	default:
		header(w, t)
		field(w, "text", &p.Text)
		field(w, "url", &p.ImageURL.url)
		rawOut(w, "input_audio", p.InputAudio)
		rawOut(w, "file", p.File)
		field(w, "file_id", &p.FileID)
		field(w, "file_data", &p.FileData)
		field(w, "file_url", &p.FileURL)
		field(w, "refusal", &p.Refusal)
		field(w, "video_url", &p.VideoURL.url)
	}
}

// rawOut writes "<|tag|>raw\n" when raw is present.
func rawOut(w *sink, tag string, raw []byte) {
	if raw == nil {
		return
	}
	w.WriteString("<|")
	w.WriteString(tag)
	w.WriteString("|>")
	w.Write(raw)
	w.WriteString("\n")
}

// renderChatMessage writes one chat message.
func renderChatMessage(w *sink, m *chatMessage) {
	header(w, m.Role.str())
	field(w, "name", &m.Name)
	field(w, "tool_call_id", &m.ToolCallID)
	renderContent(w, &m.Content)
	for i := range m.ToolCalls.calls {
		tc := &m.ToolCalls.calls[i]
		w.WriteString("\n<|tool_call|>")
		tc.ID.render(w)
		w.WriteString("\n")
		tc.Function.Name.render(w)
		w.WriteString("\n")
		tc.Function.Arguments.render(w)
	}
	if m.ToolCalls.raw != nil {
		w.WriteString("\n<|tool_calls|>")
		w.Write(m.ToolCalls.raw)
	}
	w.WriteString(endTag)
}

// renderText writes a plain text as a message with the given role; the
// responses API's instructions and string input use it, so that they render
// like the equivalent chat messages.
func renderText(w *sink, role, text string) {
	header(w, role)
	w.writeText(text)
	w.WriteString(endTag)
}

// renderItem writes one responses input item. Messages render like chat
// messages; other item types render their type and whichever fields they
// have.
func renderItem(w *sink, it *responseItem) {
	switch k := it.kind(); k {
	case "message":
		header(w, it.Role.str())
		renderContent(w, &it.Content)
	case "function_call":
		header(w, k)
		it.CallID.render(w)
		w.WriteString("\n")
		it.Name.render(w)
		w.WriteString("\n")
		it.Arguments.render(w)
	case "function_call_output":
		header(w, k)
		it.CallID.render(w)
		w.WriteString("\n")
		it.Output.render(w)
	default:
		header(w, k)
		field(w, "id", &it.ID)
		field(w, "call_id", &it.CallID)
		field(w, "name", &it.Name)
		field(w, "arguments", &it.Arguments)
		field(w, "output", &it.Output)
		rawOut(w, "summary", it.Summary)
		field(w, "encrypted_content", &it.Encrypted)
		renderContent(w, &it.Content)
	}
	w.WriteString(endTag)
}

// renderPrompt writes a completions prompt: the text as is, the texts of
// an array separated by "<|sep|>" (so ["x"] renders like "x"), token ids as
// decimal numbers each followed by a space.
func renderPrompt(w *sink, p *prompt) {
	switch {
	case p.kind == shapeString:
		w.writeText(p.text)
	case p.texts != nil:
		for i, s := range p.texts {
			if i > 0 {
				w.WriteString("<|sep|>")
			}
			w.writeText(s)
		}
	case p.tokens != nil:
		renderTokens(w, p.tokens)
	default:
		for i, b := range p.batches {
			if i > 0 {
				w.WriteString("<|sep|>")
			}
			renderTokens(w, b)
		}
	}
}

// renderTokens writes token ids as decimal numbers, each followed by a space.
func renderTokens(w *sink, toks []int64) {
	var b [24]byte
	for _, t := range toks {
		w.Write(append(strconv.AppendInt(b[:0], t, 10), ' '))
	}
}
