// apid_sdk.mjs — the official OpenAI Node SDK against apid, unchanged: model list, chat completion,
// streamed chat completion (chunks reassemble to the non-streamed text at temperature 0), text
// completion, log-probabilities (chat, streamed chat and text completion), penalties, a prompt of
// token ids, and errors (unknown model → NotFoundError, bad key → AuthenticationError).
// usage: node apid_sdk.mjs PORT KEY MODEL   (NODE_PATH: the node_modules holding openai)
import { createRequire } from "module";
const require = createRequire(process.env.NODE_PATH + "/");
const OpenAI = require("openai");

const [port, key, model] = process.argv.slice(2);
const baseURL = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ apiKey: key, baseURL, maxRetries: 0 });
let failures = 0;
const check = (ok, msg) => { if (!ok) { failures++; console.error("FAIL:", msg); } };

const models = await client.models.list();
check(models.data.some((m) => m.id === model), `models.list has ${model}: ${JSON.stringify(models.data)}`);

const messages = [{ role: "user", content: "Wherefore art thou Romeo?" }];
const chat = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 24 });
const text = chat.choices[0].message.content;
check(typeof text === "string" && text.length > 0, `chat text ${JSON.stringify(chat)}`);
check(chat.usage.completion_tokens === 24 && chat.choices[0].finish_reason === "length", `chat usage ${JSON.stringify(chat.usage)}`);

const stream = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 24, stream: true,
                                                      stream_options: { include_usage: true } });
let streamed = "", usage = null, finish = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.delta?.content ?? "";
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check(streamed === text, `streamed ${JSON.stringify(streamed)} != ${JSON.stringify(text)}`);
check(finish === "length" && usage && usage.completion_tokens === 24, `stream end: ${finish} ${JSON.stringify(usage)}`);

const comp = await client.completions.create({ model, prompt: "ROMEO:", temperature: 0, max_tokens: 12 });
check(comp.choices[0].text.length > 0 && comp.usage.completion_tokens === 12, `completion ${JSON.stringify(comp)}`);
const comp2 = await client.completions.create({ model, prompt: "ROMEO:", temperature: 0, max_tokens: 12, stop: ["\n\n"] });
check(comp.choices[0].text.startsWith(comp2.choices[0].text), "stop cuts the same text");

// log-probabilities: OpenAI's shapes, as the SDK's types read them
const lpc = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 8, logprobs: true,
                                                  top_logprobs: 2 });
const ents = lpc.choices[0].logprobs?.content ?? [];
check(ents.length === 8 && ents.map((e) => e.token).join("") === lpc.choices[0].message.content,
      `chat logprobs ${JSON.stringify(lpc.choices[0].logprobs)}`);
check(ents.every((e) => typeof e.logprob === "number" && e.logprob <= 0 && Array.isArray(e.bytes) &&
                        e.top_logprobs.length === 2 && e.top_logprobs[0].token === e.token),
      `chat logprob entries ${JSON.stringify(ents[0])}`);
const lps = await client.chat.completions.create({ model, messages, temperature: 0, max_tokens: 8, logprobs: true,
                                                  top_logprobs: 2, stream: true });
const sents = [];
for await (const chunk of lps)
  for (const c of chunk.choices) sents.push(...(c.logprobs?.content ?? []));
check(JSON.stringify(sents) === JSON.stringify(ents), `streamed logprobs ${JSON.stringify(sents).slice(0, 200)}`);
const lpt = await client.completions.create({ model, prompt: "ROMEO:", temperature: 0, max_tokens: 6, logprobs: 3,
                                             frequency_penalty: 0.5, presence_penalty: 0.5 });
const l = lpt.choices[0].logprobs;
check(l && l.tokens.length === 6 && l.token_logprobs.length === 6 && l.top_logprobs.length === 6 &&
      l.text_offset.length === 6 && l.tokens.join("") === lpt.choices[0].text, `completion logprobs ${JSON.stringify(l)}`);
const ids = await client.completions.create({ model, prompt: [1, 2, 3], temperature: 0, max_tokens: 4 });
check(ids.usage.prompt_tokens === 3 && ids.usage.completion_tokens === 4, `token-id prompt ${JSON.stringify(ids)}`);

try {
  await client.chat.completions.create({ model: "gpt-nope", messages });
  check(false, "unknown model accepted");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found", `unknown model: ${e}`);
}
try {
  await client.chat.completions.create({ model, messages, n: 3 });
  check(false, "n=3 accepted");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && e.param === "n", `n=3: ${e} param ${e.param}`);
}
try {
  await new OpenAI({ apiKey: "sk-wrong", baseURL, maxRetries: 0 }).models.list();
  check(false, "bad key accepted");
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError && e.status === 401, `bad key: ${e}`);
}
console.log(failures ? `${failures} failures` : "sdk: all checks passed");
process.exit(failures ? 1 : 0);
