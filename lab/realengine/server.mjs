// server.mjs: a small OpenAI-compatible chat server over node-llama-cpp, for
// llmroute's real-engine cache measurement. One llama.cpp context with K
// sequences ("slots"); a request takes the free slot whose cached tokens
// share the longest prefix with its prompt (least recently used when none
// does), keeps that prefix, and evaluates only the rest. The reused count is
// reported as usage.prompt_tokens_details.cached_tokens, in the model's own
// tokens, rounded down to --block-tokens (vLLM's 16-token blocks).
//
//   node server.mjs --model tiny.gguf --port 9101 [--slots 4] [--ctx 4096]
//        [--threads 1] [--block-tokens 16] [--template plain|model]
//        [--name replica-a] [--log]
//
// --template plain (the byte-vocabulary model) renders "<|role|>\ncontent\n"
// per message; --template model renders with the GGUF's own Jinja chat
// template, tools included, and tokenizes the result with special tokens
// (chat.mjs holds both, and check.mjs checks the second against a reference).
//
// Endpoints: POST /v1/chat/completions (stream or not), GET /v1/models,
// GET /health, GET /metrics (Prometheus text, vLLM metric names), and
// POST /reset (forget every slot's cached tokens; 409 while requests run).
// Listens on 127.0.0.1 only.

import http from "node:http";
import { parseArgs } from "node:util";
import { getLlama } from "node-llama-cpp";
import { ChatError, Renderer } from "./chat.mjs";

const { values: opt } = parseArgs({
  options: {
    model: { type: "string" },
    port: { type: "string", default: "9101" },
    slots: { type: "string", default: "4" },
    ctx: { type: "string", default: "4096" },
    threads: { type: "string", default: "1" },
    "block-tokens": { type: "string", default: "16" },
    "max-tokens": { type: "string", default: "16" },
    template: { type: "string", default: "plain" },
    name: { type: "string", default: "replica" },
    log: { type: "boolean", default: false },
  },
});
if (!opt.model) {
  console.error("usage: node server.mjs --model FILE.gguf --port N [--slots K] [--ctx N] [--threads N] [--block-tokens N]");
  process.exit(2);
}
const SLOTS = int(opt.slots, "slots");
const CTX = int(opt.ctx, "ctx");
const THREADS = int(opt.threads, "threads");
// Reuse granularity: the kept prefix is rounded down to a multiple of this
// many tokens, as vLLM caches (and reports) whole 16-token blocks. 1 keeps
// llama.cpp's token-exact reuse.
const BLOCK = int(opt["block-tokens"], "block-tokens");
const DEFAULT_MAX_TOKENS = int(opt["max-tokens"], "max-tokens");
const MODEL_NAME = "tiny";
const MAX_BODY = 8 << 20;

function int(s, name) {
  const n = Number.parseInt(s, 10);
  if (!Number.isFinite(n) || n <= 0) {
    console.error(`--${name} must be a positive integer`);
    process.exit(2);
  }
  return n;
}

const llama = await getLlama({ gpu: false, build: "never", maxThreads: THREADS, logLevel: "warn" });
const model = await llama.loadModel({ modelPath: opt.model });
const context = await model.createContext({ contextSize: CTX, sequences: SLOTS, threads: THREADS });
let renderer;
try {
  renderer = new Renderer(model, opt.template);
} catch (e) {
  console.error(`--template ${opt.template}: ${e.message}`);
  process.exit(2);
}

// ---- slots -----------------------------------------------------------------

const slots = [];
for (let i = 0; i < SLOTS; i++) {
  slots.push({ id: i, seq: context.getSequence(), busy: false, lastUsed: 0 });
}
let useClock = 0;
const waiters = []; // FIFO of {tokens, resolve}

const stats = {
  running: 0,
  waiting: 0,
  promptTokens: 0,
  cachedTokens: 0,
  generationTokens: 0,
  requests: { stop: 0, length: 0, abort: 0, error: 0 },
  ttftSum: 0,
  ttftCount: 0,
};

// reusable returns how many of tokens a slot can keep: the common prefix,
// rounded down to BLOCK, leaving at least one token to evaluate.
function reusable(slot, tokens) {
  const lcp = slot.seq.compareContextTokens(tokens).firstDifferentIndex;
  const kept = Math.floor(lcp / BLOCK) * BLOCK;
  return Math.min(kept, tokens.length - 1);
}

// pickSlot chooses among free slots: the longest reusable prefix, the least
// recently used on ties and when nothing is reusable.
function pickSlot(tokens) {
  let best = null;
  let bestReuse = -1;
  for (const s of slots) {
    if (s.busy) continue;
    const r = reusable(s, tokens);
    if (r > bestReuse || (r === bestReuse && s.lastUsed < best.lastUsed)) {
      best = s;
      bestReuse = r;
    }
  }
  return best;
}

// busyReuse is the longest prefix a busy slot holds for tokens: what the
// request could have reused had that slot been free. (llama.cpp's slots are
// exclusive; vLLM would share those blocks.)
function busyReuse(tokens, except) {
  let best = 0;
  for (const s of slots) {
    if (s.busy && s !== except) best = Math.max(best, reusable(s, tokens));
  }
  return best;
}

function acquire(tokens) {
  const s = pickSlot(tokens);
  if (s) {
    s.busy = true;
    return Promise.resolve(s);
  }
  stats.waiting++;
  return new Promise((resolve) => waiters.push({ tokens, resolve }));
}

function release(slot) {
  slot.busy = false;
  slot.lastUsed = ++useClock;
  while (waiters.length > 0) {
    const s = pickSlot(waiters[0].tokens);
    if (!s) break;
    const w = waiters.shift();
    stats.waiting--;
    s.busy = true;
    w.resolve(s);
  }
}

// ---- streaming text ------------------------------------------------------------

// TextStream turns generated tokens into the text deltas a client is sent,
// as vLLM's incremental detokenizer does: the answer so far is detokenized
// and only its new end is sent, holding back a trailing U+FFFD (a UTF-8
// sequence that the next tokens may complete), so that the deltas add up to
// the answer's text and a next turn repeats what the engine generated. Two
// exceptions keep time to first token the time of the first token, as with
// any real model: the first token is never held back, and nothing is held
// more than 3 tokens (a random-weight byte model emits bytes that never
// form UTF-8; they are sent as U+FFFD, and the tokens before are committed).
class TextStream {
  constructor(detokenize) {
    this.detokenize = detokenize;
    this.tokens = [];
    this.base = 0; // tokens before base are committed
    this.tail = ""; // text already sent of tokens[base:]
    this.sentAt = 0; // tokens.length at the last delta
    this.sent = false;
  }

  // push adds a token and returns the delta to send now ("" = none).
  push(tok) {
    this.tokens.push(tok);
    const t = this.detokenize(this.tokens.slice(this.base));
    let show = t.replace(/\uFFFD+$/, "");
    const force = !this.sent || this.tokens.length - this.sentAt >= 4;
    if (force && show !== t) show = t;
    const piece = this.delta(show);
    if (show === t && t.endsWith("\uFFFD")) {
      this.base = this.tokens.length;
      this.tail = "";
    }
    return piece;
  }

  // end returns what is left to send after the last token.
  end() {
    return this.delta(this.detokenize(this.tokens.slice(this.base)));
  }

  delta(show) {
    if (!show.startsWith(this.tail) || show.length === this.tail.length) return "";
    const piece = show.slice(this.tail.length);
    this.tail = show;
    this.sent = true;
    this.sentAt = this.tokens.length;
    return piece;
  }
}

class HttpError extends Error {
  constructor(status, message, type = "invalid_request_error") {
    super(message);
    this.status = status;
    this.type = type;
  }
}

// ---- HTTP --------------------------------------------------------------------

function sendJSON(res, status, obj) {
  const body = JSON.stringify(obj);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function sendError(res, err) {
  const status = err.status || 500;
  if (res.headersSent) {
    res.end();
    return;
  }
  sendJSON(res, status, { error: { message: err.message, type: err.type || "server_error", code: status } });
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    let size = 0;
    req.on("data", (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(new HttpError(413, "request body too large"));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

let idCounter = 0;

async function chat(req, res) {
  let body;
  try {
    body = JSON.parse((await readBody(req)).toString("utf8"));
  } catch (e) {
    throw e instanceof HttpError ? e : new HttpError(400, "body is not valid JSON");
  }
  if (!body || typeof body !== "object" || !Array.isArray(body.messages) || body.messages.length === 0) {
    throw new HttpError(400, "messages must be a non-empty array");
  }
  for (const m of body.messages) {
    if (!m || typeof m.role !== "string") throw new HttpError(400, "every message needs a role");
  }
  if (body.tools != null && !Array.isArray(body.tools)) throw new HttpError(400, "tools must be an array");
  let maxTokens = body.max_completion_tokens ?? body.max_tokens ?? DEFAULT_MAX_TOKENS;
  if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new HttpError(400, "max_tokens must be a positive integer");
  const stream = body.stream === true;
  const includeUsage = stream && body.stream_options?.include_usage === true;
  const ignoreEos = body.ignore_eos === true;

  let tokens;
  try {
    tokens = renderer.tokenize(renderer.render(body.messages, body.tools));
  } catch (e) {
    throw e instanceof ChatError ? new HttpError(400, e.message) : e;
  }
  if (tokens.length + maxTokens > CTX) {
    throw new HttpError(400, `prompt (${tokens.length} tokens) plus max_tokens (${maxTokens}) exceeds the context (${CTX})`);
  }

  const id = `chatcmpl-${opt.name}-${++idCounter}`;
  const created = Math.floor(Date.now() / 1000);
  let aborted = false;
  res.on("close", () => {
    if (!res.writableFinished) aborted = true;
  });

  const arrived = performance.now();
  const slot = await acquire(tokens);
  stats.running++;
  const queuedMs = performance.now() - arrived;
  let cached = 0;
  let generated = 0;
  let finish = "length";
  let ttftMs = -1;
  let text = "";
  let heldBusy = 0;
  const answer = new TextStream((toks) => model.detokenize(toks));
  let first = true;
  const send = (piece) => {
    if (piece === "") return;
    text += piece;
    if (stream) writeDelta(res, id, created, first, piece);
    first = false;
  };
  try {
    cached = reusable(slot, tokens);
    heldBusy = busyReuse(tokens, slot);
    const lcp = slot.seq.compareContextTokens(tokens).firstDifferentIndex;
    // Which slot served, what it reused, what a busy slot held, and the
    // token-exact common prefix before rounding: lets the load generator
    // tell evictions from slot contention, and see how much of an earlier
    // answer a next turn repeated token for token.
    res.setHeader("x-engine-slot", `slot=${slot.id} reuse=${cached} busy_reuse=${heldBusy} lcp=${lcp}`);
    if (slot.seq.nextTokenIndex > cached) {
      await slot.seq.eraseContextTokenRanges([{ start: cached, end: slot.seq.nextTokenIndex }]);
    }
    stats.promptTokens += tokens.length;
    stats.cachedTokens += cached;
    if (aborted) {
      finish = "abort";
      return;
    }
    if (stream) {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache", connection: "keep-alive" });
    }
    const it = slot.seq.evaluate(tokens.slice(cached), { temperature: 0 });
    try {
      while (generated < maxTokens) {
        const r = await it.next();
        if (r.done) {
          finish = "stop";
          break;
        }
        if (ttftMs < 0) ttftMs = performance.now() - arrived;
        const tok = r.value;
        if (!ignoreEos && model.isEogToken(tok)) {
          finish = "stop";
          break;
        }
        generated++;
        if (aborted) {
          finish = "abort";
          break;
        }
        // A token that completes no character (part of a UTF-8 sequence,
        // a special token) adds no text, and no chunk.
        send(answer.push(tok));
      }
    } finally {
      await it.return();
    }
    if (!aborted) send(answer.end());
  } catch (e) {
    finish = "error";
    stats.requests.error++;
    throw e;
  } finally {
    stats.running--;
    release(slot);
    if (finish !== "error") stats.requests[finish]++;
    stats.generationTokens += generated;
    if (ttftMs >= 0) {
      stats.ttftSum += ttftMs / 1000;
      stats.ttftCount++;
    }
    if (opt.log) {
      console.log(JSON.stringify({ t: Date.now(), replica: opt.name, id, bench: req.headers["x-bench-request"], slot: slot.id, busy_reuse: heldBusy, prompt_tokens: tokens.length, cached_tokens: cached, generated, finish, queued_ms: round(queuedMs), ttft_ms: round(ttftMs) }));
    }
  }
  if (finish === "abort") return;

  const usage = {
    prompt_tokens: tokens.length,
    completion_tokens: generated,
    total_tokens: tokens.length + generated,
    prompt_tokens_details: { cached_tokens: cached },
  };
  if (stream) {
    res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model: MODEL_NAME, choices: [{ index: 0, delta: {}, finish_reason: finish }] })}\n\n`);
    if (includeUsage) {
      res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model: MODEL_NAME, choices: [], usage })}\n\n`);
    }
    res.end("data: [DONE]\n\n");
  } else {
    sendJSON(res, 200, {
      id, object: "chat.completion", created, model: MODEL_NAME,
      choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: finish }],
      usage,
    });
  }
}

// writeDelta streams one content chunk (with the role in the first).
function writeDelta(res, id, created, first, content) {
  const delta = first ? { role: "assistant", content } : { content };
  res.write(`data: ${JSON.stringify({ id, object: "chat.completion.chunk", created, model: MODEL_NAME, choices: [{ index: 0, delta, finish_reason: null }] })}\n\n`);
}

function round(x) {
  return Math.round(x * 100) / 100;
}

function metrics() {
  const used = slots.reduce((n, s) => n + s.seq.nextTokenIndex, 0);
  const lbl = `model_name="${MODEL_NAME}"`;
  const lines = [];
  const put = (name, type, help, value, labels = lbl) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`, `${name}{${labels}} ${value}`);
  };
  put("vllm:num_requests_running", "gauge", "Requests holding a slot.", stats.running);
  put("vllm:num_requests_waiting", "gauge", "Requests waiting for a free slot.", stats.waiting);
  put("vllm:kv_cache_usage_perc", "gauge", "Fraction of the slots' token cells holding tokens (1 = full).", (used / (SLOTS * CTX)).toFixed(6));
  put("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", stats.promptTokens);
  put("vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache (reused).", stats.cachedTokens);
  put("vllm:prompt_tokens_total", "counter", "Prompt tokens received.", stats.promptTokens);
  put("vllm:generation_tokens_total", "counter", "Tokens generated.", stats.generationTokens);
  put("vllm:time_to_first_token_seconds_sum", "counter", "Sum of server-side time to first token.", stats.ttftSum.toFixed(6));
  put("vllm:time_to_first_token_seconds_count", "counter", "Requests with a first token.", stats.ttftCount);
  lines.push("# HELP vllm:request_success_total Finished requests by finish reason.", "# TYPE vllm:request_success_total counter");
  for (const [reason, n] of Object.entries(stats.requests)) {
    lines.push(`vllm:request_success_total{${lbl},finished_reason="${reason}"} ${n}`);
  }
  // Cache size in vLLM's terms: SLOTS*CTX token cells in BLOCK-token blocks.
  put("vllm:cache_config_info", "gauge", "Cache configuration.", 1,
    `block_size="${BLOCK}",num_gpu_blocks="${Math.floor((SLOTS * CTX) / BLOCK)}",slots="${SLOTS}"`);
  return lines.join("\n") + "\n";
}

async function reset(res) {
  if (slots.some((s) => s.busy) || waiters.length > 0) {
    throw new HttpError(409, "requests are running", "conflict");
  }
  for (const s of slots) {
    s.busy = true;
  }
  try {
    for (const s of slots) {
      await s.seq.clearHistory();
      s.lastUsed = 0;
    }
  } finally {
    for (const s of slots) s.busy = false;
    useClock = 0;
  }
  sendJSON(res, 200, { reset: SLOTS });
}

const server = http.createServer(async (req, res) => {
  try {
    const path = req.url.split("?")[0];
    if (req.method === "POST" && (path === "/v1/chat/completions" || path === "/chat/completions")) {
      await chat(req, res);
    } else if (req.method === "GET" && path === "/health") {
      sendJSON(res, 200, { status: "ok" });
    } else if (req.method === "GET" && path === "/metrics") {
      const body = metrics();
      res.writeHead(200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
      res.end(body);
    } else if (req.method === "GET" && (path === "/v1/models" || path === "/models")) {
      sendJSON(res, 200, { object: "list", data: [{ id: MODEL_NAME, object: "model", owned_by: "llmroute-realengine" }] });
    } else if (req.method === "POST" && path === "/reset") {
      await reset(res);
    } else {
      throw new HttpError(404, `no route for ${req.method} ${path}`, "not_found");
    }
  } catch (e) {
    if (!(e instanceof HttpError)) console.error(`${opt.name}:`, e);
    sendError(res, e);
  }
});
server.keepAliveTimeout = 60_000;
server.listen(Number(opt.port), "127.0.0.1", () => {
  console.error(`${opt.name}: listening on 127.0.0.1:${opt.port} (${SLOTS} slots x ${CTX} tokens, ${THREADS} thread, reuse in ${BLOCK}-token blocks, ${opt.template} template)`);
});

for (const sig of ["SIGINT", "SIGTERM"]) {
  process.on(sig, async () => {
    server.close();
    await context.dispose();
    await model.dispose();
    await llama.dispose();
    process.exit(0);
  });
}
