// apid_web.mjs — the web page in a real browser (Debian's chromium, headless, driven by
// playwright-core): type a message, check that the streamed reply equals the API's greedy reply for
// the same conversation, then kill a stage and see its restart on the page's pipeline view.
// usage: node apid_web.mjs PORT KEY   (NODE_PATH: the node_modules holding playwright-core)
import { createRequire } from "module";
const require = createRequire(process.env.NODE_PATH + "/");
const { chromium } = require("playwright-core");

const [port, key] = process.argv.slice(2);
const base = `http://127.0.0.1:${port}`;
let failures = 0;
const check = (ok, msg) => { if (!ok) { failures++; console.error("FAIL:", msg); } };
const api = async (path, body) => {
  const r = await fetch(base + path, { method: body ? "POST" : "GET", body: body && JSON.stringify(body),
                                       headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" } });
  return r.json();
};

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"],
});
try {
  // the page needs the key: the browser logs in with HTTP Basic (any user, the key as password)
  const r0 = await fetch(base + "/");
  check(r0.status === 401 && (r0.headers.get("www-authenticate") || "").startsWith("Basic"),
        `page without the key: ${r0.status} ${r0.headers.get("www-authenticate")}`);

  const ctx = await browser.newContext({ httpCredentials: { username: "pinfer", password: key } });
  const page = await ctx.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("requestfailed", (r) => { if (!r.url().includes("/v1/chat")) errors.push("request failed " + r.url()); });
  const resp = await page.goto(base + "/");
  check(resp.status() === 200, `page status ${resp.status()}`);
  await page.waitForSelector("#stage-gpud .state", { timeout: 15000 });
  check((await page.textContent("#inst-state")) === "serving", "the page shows the instance serving");

  await page.click("#settings summary"); // the sampling settings are folded away
  await page.fill("#temperature", "0");
  await page.fill("#max_tokens", "20");
  await page.fill("#input", "Wherefore art thou Romeo?");
  await page.click("#send");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 60000 });
  const shown = await page.$eval(".msg.assistant", (el) => el.firstChild ? el.firstChild.textContent : "");
  const want = await api("/v1/chat/completions", { messages: [{ role: "user", content: "Wherefore art thou Romeo?" }],
                                                   temperature: 0, max_tokens: 20, top_p: 0.95, top_k: 40 });
  check(shown === want.choices[0].message.content,
        `page reply ${JSON.stringify(shown)} != API ${JSON.stringify(want.choices[0].message.content)}`);
  check((await page.getAttribute(".msg.assistant", "data-finish")) === want.choices[0].finish_reason, "finish shown");

  // stop button: a long reply interrupted
  await page.fill("#max_tokens", "200");
  await page.fill("#input", "Tell me more.");
  await page.click("#send");
  // the tiny model may finish 200 tokens before the click: stop when the button still allows it
  await page.click("#stop:not([disabled])", { timeout: 2000 }).catch(() => {});
  await page.waitForSelector('.msg.assistant:nth-of-type(4)[data-state="done"]', { timeout: 60000 });

  // kill cpud: the pipeline view shows its restart
  const st = await api("/api/status");
  const before = st.stages.cpud.restarts;
  process.kill(st.stages.cpud.pid, "SIGKILL");
  await page.waitForFunction((b) => {
    const el = document.getElementById("stage-cpud");
    return el && Number(el.dataset.restarts) === b + 1 && el.dataset.state === "ready";
  }, before, { timeout: 30000 });
  check((await page.textContent("#stage-cpud .restarts")) === String(before + 1), "restart count shown");
  check(await page.$eval("#stage-cpud", (el) => el.classList.contains("restarted")), "restart highlighted");
  check(errors.length === 0, `page errors: ${errors.join("; ")}`);
} finally {
  await browser.close();
}
console.log(failures ? `${failures} failures` : "web: all checks passed");
process.exit(failures ? 1 : 0);
