// chat.mjs: how the replica server turns an OpenAI chat request into prompt
// tokens. server.mjs and check.mjs both import it, so the tokenization check
// tests exactly what the server does.
//
// Two templates:
//   - "plain": one "<|role|>\ncontent\n" block per message, then
//     "<|assistant|>\n", tokenized without special tokens after a BOS (the
//     byte-vocabulary model: its markers are ordinary text);
//   - "model": the GGUF's own Jinja chat template (tokenizer.chat_template),
//     rendered as Hugging Face's apply_chat_template renders it
//     (add_generation_prompt, the request's tools), and the rendered string
//     tokenized with special tokens parsed, as vLLM does. Rendering first and
//     tokenizing the whole string is what matches the reference tokenizer;
//     tokenizing segment by segment (node-llama-cpp's chat wrappers) does not.

import { Template } from "@huggingface/jinja";

export class ChatError extends Error {
  constructor(message) {
    super(message);
    this.status = 400;
    this.type = "invalid_request_error";
  }
}

// contentText flattens an OpenAI content (a string, null, or an array of
// parts) to the string a template sees: text parts joined with nothing
// between them, other parts dropped. The Qwen3 template calls string
// methods on content, so an array or null cannot reach it.
export function contentText(c) {
  if (typeof c === "string") return c;
  if (c == null) return "";
  if (Array.isArray(c)) {
    return c.map((p) => (p && typeof p === "object" && typeof p.text === "string" ? p.text : "")).join("");
  }
  throw new ChatError("message content must be a string or an array of text parts");
}

// templateMessages returns the messages as a chat template reads them:
// content as a string, tool calls and their fields kept, nothing else.
export function templateMessages(messages) {
  return messages.map((m) => {
    const out = { role: m.role, content: contentText(m.content) };
    for (const k of ["name", "tool_call_id", "reasoning_content"]) {
      if (typeof m[k] === "string") out[k] = m[k];
    }
    if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) out.tool_calls = m.tool_calls;
    return out;
  });
}

// plainRender is the byte model's template.
export function plainRender(messages) {
  let out = "";
  for (const m of messages) {
    out += `<|${m.role}|>\n${contentText(m.content)}\n`;
  }
  return out + "<|assistant|>\n";
}

// Renderer renders and tokenizes chats for one model and template kind.
export class Renderer {
  // model is a node-llama-cpp LlamaModel; kind is "plain" or "model".
  constructor(model, kind) {
    this.model = model;
    this.kind = kind;
    if (kind === "model") {
      const src = model.fileInfo?.metadata?.tokenizer?.chat_template;
      if (typeof src !== "string" || src === "") {
        throw new Error("the model has no tokenizer.chat_template");
      }
      this.source = src;
      this.template = new Template(src);
    } else if (kind !== "plain") {
      throw new Error(`unknown template kind ${kind}`);
    }
  }

  // render returns the prompt text of a chat request's messages and tools.
  render(messages, tools) {
    if (this.kind === "plain") return plainRender(messages);
    const ctx = { messages: templateMessages(messages), add_generation_prompt: true, bos_token: "", eos_token: "" };
    if (Array.isArray(tools) && tools.length > 0) ctx.tools = tools;
    try {
      return this.template.render(ctx);
    } catch (e) {
      throw new ChatError(`chat template: ${e.message}`);
    }
  }

  // tokenize returns the prompt tokens of a rendered prompt: with the plain
  // template a BOS and the text as ordinary bytes; with the model's template
  // the text with its special tokens parsed (Qwen3 adds no BOS).
  tokenize(text) {
    if (this.kind === "plain") return [this.model.tokens.bos, ...this.model.tokenize(text, false)];
    return Array.from(this.model.tokenize(text, true));
  }
}
