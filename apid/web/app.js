// pinfer's web page: a streaming chat with the model (OpenAI's /v1/chat/completions with
// "stream": true, read as server-sent events) and a live view of the pipeline (/api/status, polled).
// Plain browser JavaScript, no build step, nothing loaded from elsewhere.
"use strict";

const $ = (id) => document.getElementById(id);
const history = []; // {role, content}
let controller = null;
let modelId = null;
const lastRestarts = {};

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("apikey").value || localStorage.getItem("pinfer.apikey") || "";
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  $("messages").appendChild(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function settings() {
  const num = (id) => ($(id).value === "" ? undefined : Number($(id).value));
  const body = { temperature: num("temperature"), max_tokens: num("max_tokens"), top_p: num("top_p"),
                 top_k: num("top_k"), seed: num("seed") };
  for (const k of Object.keys(body)) if (body[k] === undefined || Number.isNaN(body[k])) delete body[k];
  return body;
}

async function send(text) {
  history.push({ role: "user", content: text });
  addMessage("user", text);
  const out = addMessage("assistant", "");
  out.dataset.state = "streaming";
  const messages = [];
  if ($("system").value) messages.push({ role: "system", content: $("system").value });
  messages.push(...history);
  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  let reply = "", finish = null, usage = null;
  const t0 = performance.now();
  let tFirst = null;
  try {
    const resp = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), signal: controller.signal,
      body: JSON.stringify({ model: modelId || undefined, messages, stream: true,
                             stream_options: { include_usage: true }, ...settings() }),
    });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || resp.statusText);
    }
    const reader = resp.body.getReader();
    const dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let nl;
      while ((nl = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, nl);
        buf = buf.slice(nl + 2);
        for (const line of event.split("\n")) {
          if (!line.startsWith("data: ")) continue;
          const data = line.slice(6);
          if (data === "[DONE]") continue;
          const chunk = JSON.parse(data);
          if (chunk.error) throw new Error(chunk.error.message);
          if (chunk.usage) usage = chunk.usage;
          for (const c of chunk.choices || []) {
            if (c.delta && c.delta.content) {
              if (tFirst === null) tFirst = performance.now();
              reply += c.delta.content;
              out.textContent = reply;
            }
            if (c.finish_reason) finish = c.finish_reason;
          }
        }
      }
      out.scrollIntoView({ block: "end" });
    }
  } catch (e) {
    if (e.name === "AbortError") finish = "stopped";
    else addMessage("error", String(e.message || e));
  } finally {
    controller = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
  history.push({ role: "assistant", content: reply });
  out.dataset.state = "done";
  out.dataset.finish = finish || "";
  const meta = document.createElement("span");
  meta.className = "meta";
  const secs = (performance.now() - t0) / 1000;
  meta.textContent = [finish, usage && `${usage.completion_tokens} tokens`,
                      tFirst !== null && `first token ${((tFirst - t0) / 1000).toFixed(2)} s`,
                      `${secs.toFixed(2)} s`].filter(Boolean).join(" · ");
  out.appendChild(meta);
}

$("composer").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); $("composer").requestSubmit(); }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("clear").addEventListener("click", () => { history.length = 0; $("messages").textContent = ""; });
$("apikey").addEventListener("change", () => localStorage.setItem("pinfer.apikey", $("apikey").value));

// ---- the pipeline view ----

const ORDER = ["loaderd", "predictord", "cpud", "gpud", "apid"];
const ROLE = { loaderd: "weights → shared memory", predictord: "which neurons fire", cpud: "cold neurons (CPU)",
               gpud: "attention, hot neurons, sampling", apid: "this HTTP API" };

function fmtBytes(b) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (b >= 1024 && i < u.length - 1) { b /= 1024; i++; }
  return `${b.toFixed(i ? 1 : 0)} ${u[i]}`;
}

function renderStages(st) {
  const box = $("stages");
  const maxStep = Math.max(1e-9, ...Object.values(st.stages).map((s) => s.step_ms));
  for (const name of ORDER) {
    const s = st.stages[name];
    if (!s) continue;
    let el = $("stage-" + name);
    if (!el) {
      el = document.createElement("div");
      el.className = "stage";
      el.id = "stage-" + name;
      el.innerHTML = `<span class="name">${name}</span><span><span class="role muted"></span>
        <div class="detail"></div><div class="timebar"></div></span><span class="state"></span>`;
      el.querySelector(".role").textContent = ROLE[name] || "";
      box.appendChild(el);
    }
    el.querySelector(".state").textContent = s.state;
    el.querySelector(".state").className = "state st-" + s.state;
    el.dataset.restarts = s.restarts;
    el.dataset.state = s.state;
    el.querySelector(".detail").innerHTML = "";
    const d = el.querySelector(".detail");
    d.append(`pid ${s.pid || "–"} · `);
    const r = document.createElement("span");
    r.className = "restarts";
    r.textContent = s.restarts;
    d.append(r, ` restart${s.restarts === 1 ? "" : "s"}`);
    if (s.items) d.append(` · ${s.step_ms.toFixed(3)} ms/step · ${s.items} steps`);
    if (s.fallbacks) d.append(` · ${s.fallbacks} fallbacks`);
    el.querySelector(".timebar").style.width = `${Math.max(1, (100 * s.step_ms) / maxStep)}%`;
    if (lastRestarts[name] !== undefined && s.restarts > lastRestarts[name]) {
      el.classList.remove("restarted");
      void el.offsetWidth; // restart the animation
      el.classList.add("restarted");
    }
    lastRestarts[name] = s.restarts;
  }
}

function renderSlots(st) {
  const box = $("slots");
  st.slots.forEach((s, i) => {
    let el = box.children[i];
    if (!el) { el = document.createElement("div"); box.appendChild(el); }
    el.className = "slot " + s.state;
    el.title = `slot ${i}: ${s.state}` + (s.state !== "free" ? ` (${s.n_prompt} prompt + ${s.n_gen} generated)` : "");
    el.textContent = s.state === "running" ? s.n_gen : "";
  });
  $("slot-summary").textContent = `${st.slots_busy} of ${st.slots.length} busy`;
}

async function poll() {
  try {
    const resp = await fetch("/api/status", { headers: headers() });
    if (resp.ok) {
      const st = await resp.json();
      modelId = st.model || modelId;
      $("model").textContent = `${st.model} · ${st.instance} · context ${st.n_ctx}` +
                               (st.chat_template ? ` · template ${st.chat_template}` : "");
      $("inst-state").textContent = st.state;
      $("inst-state").className = "pill " + st.state;
      $("tok-s").textContent = st.decode_tok_s.toFixed(1);
      $("gen-total").textContent = st.generated_tokens;
      renderStages(st);
      renderSlots(st);
      const q = st.queue;
      $("queue-bar").style.width = `${Math.min(100, (100 * q.admitted) / q.capacity)}%`;
      $("queue-text").textContent = `${q.admitted} in progress of ${q.capacity} accepted at once · ${q.waiting} waiting for a slot`;
      const m = $("memory");
      m.innerHTML = "";
      const rows = [["weights in RAM (shared)", fmtBytes(st.memory.weights_bytes)],
                    ["FFN share on gpud", `${(100 * st.memory.gpu_ffn_share).toFixed(0)} %`],
                    ["predictor recall", st.predictor_recall === null ? "no audit (--audit-rate)" :
                                         `${(100 * st.predictor_recall).toFixed(2)} %`],
                    ["prompt tokens", st.prompt_tokens]];
      for (const [k, v] of rows) {
        const dt = document.createElement("dt"); dt.textContent = k;
        const dd = document.createElement("dd"); dd.textContent = v;
        m.append(dt, dd);
      }
    }
  } catch (e) { /* apid restarting: try again */ }
  setTimeout(poll, 1000);
}
poll();
