// The real Anthropic SDK against llmroute in front of simulated replicas,
// driven by integration/anthropic_sdk_test.go: LLMROUTE_URL is the router,
// LLMROUTE_KEY its API key (sent as x-api-key, as the SDK does). Each check
// records what the SDK did; the Go test judges. One JSON object is written
// to stdout.
import Anthropic from '@anthropic-ai/sdk';

const baseURL = process.env.LLMROUTE_URL;
const apiKey = process.env.LLMROUTE_KEY;
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 20_000 });
const params = {
  model: 'sim-model',
  max_tokens: 64,
  system: [{ type: 'text', text: 'You are a terse assistant used by the llmroute SDK test.', cache_control: { type: 'ephemeral' } }],
  messages: [{ role: 'user', content: 'Say something short.' }],
};
// cut makes the simulated replica close the connection after two tokens.
const cut = { headers: { 'X-Sim-Fault': 'cut-after=2' } };

// outcome runs fn and records its result or the error it raised.
async function outcome(fn) {
  const start = Date.now();
  try {
    return { ok: true, ...(await fn()), ms: Date.now() - start };
  } catch (err) {
    return {
      ok: false,
      ms: Date.now() - start,
      name: err?.constructor?.name ?? typeof err,
      status: err?.status ?? null,
      errorType: err?.error?.error?.type ?? null,
      message: String(err?.message ?? err).slice(0, 200),
    };
  }
}

// rawStream iterates a raw event stream, recording the event types seen.
async function rawStream(options, seen) {
  const stream = await client.messages.create({ ...params, stream: true }, options);
  let text = '';
  for await (const ev of stream) {
    seen.push(ev.type);
    if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
  }
  return { text };
}

const result = {};
result.helper = await outcome(async () => {
  const stream = client.messages.stream(params);
  const msg = await stream.finalMessage();
  return { text: msg.content.map((b) => b.text ?? '').join(''), stopReason: msg.stop_reason, usage: msg.usage };
});
// A second identical request: the replica's cache serves its prompt.
result.helperAgain = await outcome(async () => {
  const msg = await client.messages.stream(params).finalMessage();
  return { usage: msg.usage };
});
const rawSeen = [];
result.raw = await outcome(() => rawStream(undefined, rawSeen));
result.raw.events = rawSeen;

result.json = await outcome(async () => {
  const msg = await client.messages.create(params);
  return { type: msg.type, stopReason: msg.stop_reason, usage: msg.usage };
});
result.count = await outcome(async () => {
  const c = await client.messages.countTokens({ model: params.model, system: params.system, messages: params.messages });
  return { inputTokens: c.input_tokens };
});
result.badKey = await outcome(async () => {
  const bad = new Anthropic({ baseURL, apiKey: 'sk-wrong', maxRetries: 0, timeout: 20_000 });
  await bad.messages.create(params);
  return {};
});

// The cuts come last: a replica that cut a stream cools for a while.
result.helperCut = await outcome(async () => {
  const msg = await client.messages.stream(params, cut).finalMessage();
  return { text: msg.content.map((b) => b.text ?? '').join('') };
});
const cutSeen = [];
result.rawCut = await outcome(() => rawStream(cut, cutSeen));
result.rawCut.events = cutSeen;

// Exit once written: idle keep-alive sockets would hold the process open.
process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0));
