#!/usr/bin/env python3
"""test_apid — the HTTP front door against real instances of the tiny model, as clients use it:
greedy completions equal `pictl run --temp 0` (text and chat through the template), streamed chunks
(OpenAI's format, include_usage, [DONE]) reassemble to the non-streamed text, stop strings (also one
split over tokens), a table of bad inputs that each get the right status and OpenAI error JSON (and
the server keeps serving), the API key (constant-time compared, /health open), /metrics parsed by the
Prometheus text parser, tokenize/detokenize, a client that disconnects (its slot is freed), a bounded
queue (429 + Retry-After), the per-request timeout, kill -9 of apid during a stream (the supervisor
restarts it, the next request succeeds, the engine did not restart), and a loopback load test (8
clients x 50 requests, mixed streaming, zero failures).

--rss-only: only the load test, twice, and apid's RSS must not grow over the second identical round.
Measured on a release build (meson registers it in the 'release' suite; scripts/test.sh runs that
suite in build-release, which .ci/run builds): under ASan the allocator's quarantine and shadow
memory make RSS say nothing about leaks, so a sanitized build (--sanitized) reports SKIP.

The tiny model has no chat template and no end-of-turn token: templates_from_model makes a copy
whose token the greedy generation reaches third is the Phi-3 end of turn "<|end|>" (a control token
the engine does not stop at: apid must), with a Phi-3 template, and checks that apid recognises it,
stops there (finish_reason "stop", the token not in the text) and that --chat-template overrides it.

usage: test_apid.py PICTL APID MODEL.gguf MAKER [--rss-only [--sanitized]]   (MAKER: test_apid_templates)"""
import http.client, json, os, shutil, signal, socket, subprocess, sys, threading, time

pictl, apid_exe, model, maker = sys.argv[1:5]
rss_only = "--rss-only" in sys.argv[5:]
if rss_only and "--sanitized" in sys.argv[5:]:
    print("SKIP: apid's RSS is measured on a release build (scripts/test.sh runs the 'release' suite in "
          "build-release), not under the sanitizers")
    sys.exit(77)
uid = os.geteuid()
tag = f"ap{os.getpid()}"
KEY = "sk-test-" + "k" * 24
failures = 0
checks = 0


def check(cond, msg):
    global failures, checks
    checks += 1
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run(*args, timeout=120):
    return subprocess.run([pictl, *args], capture_output=True, timeout=timeout)


def status(name):
    p = run("status", "--name", name, "--json")
    return json.loads(p.stdout) if p.returncode == 0 else None


def wait_for(pred, timeout, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def runtime_dir(name):
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(xdg, "pinfer", name) if xdg else f"/tmp/pinfer-{uid}/{name}"


def cleanup(name):
    run("stop", "--name", name, timeout=60)
    shutil.rmtree(runtime_dir(name), ignore_errors=True)


class Client:
    def __init__(self, port, key=None):
        self.port, self.key = port, key

    def request(self, method, path, body=None, headers=None, raw=None, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if self.key:
            h["Authorization"] = "Bearer " + self.key
        h.update(headers or {})
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        out = r.read()
        c.close()
        return r.status, dict(r.getheaders()), out

    def json(self, method, path, body=None, **kw):
        st, h, out = self.request(method, path, body, **kw)
        try:
            return st, h, json.loads(out)
        except ValueError:
            return st, h, out

    def stream(self, path, body, on_chunk=None):
        """POST with stream: true; returns (status, list of parsed events, saw_done)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        h = {"Content-Type": "application/json", "Authorization": "Bearer " + self.key} if self.key else {}
        c.request("POST", path, body=json.dumps(body).encode(), headers=h)
        r = c.getresponse()
        if r.status != 200:
            out = r.read()
            c.close()
            return r.status, [json.loads(out)], False
        check(r.getheader("Content-Type", "").startswith("text/event-stream"), "SSE content type")
        events, done, buf = [], False, b""
        while True:
            line = r.readline()
            if not line:
                break
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            if not check(line.startswith(b"data: "), f"SSE line {line[:80]!r}"):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                done = True
                continue
            ev = json.loads(payload)
            events.append(ev)
            if on_chunk:
                on_chunk(ev, c)
        c.close()
        return 200, events, done


def reassemble(events, chat):
    text, finish = "", None
    for ev in events:
        for ch in ev.get("choices", []):
            if chat:
                text += ch["delta"].get("content", "") or ""
            else:
                text += ch.get("text", "")
            if ch.get("finish_reason"):
                finish = ch["finish_reason"]
    return text, finish


def pictl_greedy(prompt, n):
    p = run("run", "-m", model, "-p", prompt, "--temp", "0", "-n", str(n), "-t", "1", "-c", "256")
    check(p.returncode == 0, f"pictl run: {p.stderr[-300:]!r}")
    out = p.stdout.decode()
    return out[:-1] if out.endswith("\n") else out  # pictl ends the completion with a newline


def chatml(messages):
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + "<|im_start|>assistant\n"


# ---------------------------------------------------------------------------------------------------

def greedy_and_streams(c):
    prompt, n = "ROMEO:", 24
    want = pictl_greedy(prompt, n)
    st, _, r = c.json("POST", "/v1/completions", {"model": "tiny-relu-llama-f16", "prompt": prompt, "max_tokens": n,
                                                  "temperature": 0})
    if check(st == 200, f"completion status {st} {r}"):
        check(r["object"] == "text_completion" and r["id"].startswith("cmpl-"), f"completion shape {r}")
        check(r["choices"][0]["text"] == want, f"HTTP greedy {r['choices'][0]['text']!r} != pictl run {want!r}")
        check(r["choices"][0]["finish_reason"] == "length", "finish length")
        u = r["usage"]
        check(u["completion_tokens"] == n and u["total_tokens"] == u["prompt_tokens"] + n, f"usage {u}")
    st, ev, done = c.stream("/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "stream": True})
    text, fin = reassemble(ev, False)
    check(st == 200 and done, "completion stream ends with [DONE]")
    check(text == want and fin == "length", f"streamed {text!r} ({fin}) != {want!r}")
    check(all(e["object"] == "text_completion" for e in ev), "stream chunk objects")

    msgs = [{"role": "system", "content": "You are Juliet."}, {"role": "user", "content": "Wherefore art thou?"}]
    want = pictl_greedy(chatml(msgs), n)
    st, _, r = c.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": n, "temperature": 0})
    if check(st == 200, f"chat status {st} {r}"):
        check(r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-"), "chat shape")
        m = r["choices"][0]["message"]
        check(m["role"] == "assistant" and m["content"] == want, f"chat greedy {m['content']!r} != {want!r}")
    st, ev, done = c.stream("/v1/chat/completions", {"messages": msgs, "max_tokens": n, "temperature": 0,
                                                     "stream": True, "stream_options": {"include_usage": True}})
    text, fin = reassemble(ev, True)
    check(st == 200 and done and text == want and fin == "length", f"chat stream {text!r} {fin} {done}")
    check(ev and ev[0]["choices"][0]["delta"].get("role") == "assistant", "first chunk carries the role")
    check(ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] == n, f"usage chunk {ev[-1]}")
    check(all("usage" in e for e in ev) and all(e["usage"] is None for e in ev[:-1]), "usage: null before the last")
    check(all(e["object"] == "chat.completion.chunk" for e in ev), "chat chunk objects")

    # stop strings: a word of the greedy text, and a two-character one likely split over tokens
    full = pictl_greedy(prompt, n)
    for stop in ("will", "I w", "\n\n"):
        k = full.find(stop)
        if k < 0:
            continue
        st, _, r = c.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "stop": [stop]})
        check(st == 200 and r["choices"][0]["text"] == full[:k] and r["choices"][0]["finish_reason"] == "stop",
              f"stop {stop!r}: {r}")
        st, ev, done = c.stream("/v1/completions", {"prompt": prompt, "max_tokens": n, "temperature": 0, "stop": stop,
                                                    "stream": True})
        text, fin = reassemble(ev, False)
        check(text == full[:k] and fin == "stop" and done, f"streamed stop {stop!r}: {text!r} {fin}")


def pictl_chat_matches(c, name):
    """pictl chat, on the same template, answers as the HTTP API does (two turns, greedy)."""
    p = subprocess.run([pictl, "chat", "--name", name, "--temp", "0", "-n", "8"], input=b"Hi\nAnd then?\n",
                       capture_output=True, timeout=120)
    check(p.returncode == 0, f"pictl chat: {p.stderr!r}")
    msgs = [{"role": "user", "content": "Hi"}]
    st, _, r1 = c.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0})
    a1 = r1["choices"][0]["message"]["content"]
    msgs += [{"role": "assistant", "content": a1}, {"role": "user", "content": "And then?"}]
    st, _, r2 = c.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 8, "temperature": 0})
    a2 = r2["choices"][0]["message"]["content"]
    check(p.stdout.decode() == a1 + "\n" + a2 + "\n", f"pictl chat {p.stdout!r} != HTTP {a1!r} / {a2!r}")


def bad_inputs(c, port):
    long_prompt = "ROMEO: " * 400
    cases = [
        # (what, method, path, body-or-raw, headers, status, code)
        ("malformed JSON", "POST", "/v1/chat/completions", b"{\"messages\": [", None, 400, "invalid_json"),
        ("body not an object", "POST", "/v1/completions", b"[1,2]", None, 400, "invalid_request"),
        ("unknown model (chat)", "POST", "/v1/chat/completions", {"model": "x"}, None, 404, "model_not_found"),
        ("messages missing (no model)", "POST", "/v1/chat/completions", {"max_tokens": 3}, None, 400,
         "missing_required_parameter"),
        ("empty messages", "POST", "/v1/chat/completions", {"messages": []}, None, 400, "invalid_value"),
        ("messages not an array", "POST", "/v1/chat/completions", {"messages": "hi"}, None, 400, "invalid_type"),
        ("bad role", "POST", "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]}, None, 400,
         "invalid_value"),
        ("content wrong type", "POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, None,
         400, "invalid_type"),
        ("image part", "POST", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, None, 400,
         "unsupported_parameter"),
        ("temperature a string", "POST", "/v1/completions", {"prompt": "a", "temperature": "hot"}, None, 400,
         "invalid_type"),
        ("temperature out of range", "POST", "/v1/completions", {"prompt": "a", "temperature": 7}, None, 400,
         "invalid_value"),
        ("negative max_tokens", "POST", "/v1/completions", {"prompt": "a", "max_tokens": -5}, None, 400,
         "invalid_value"),
        ("max_tokens beyond the context", "POST", "/v1/completions", {"prompt": "a", "max_tokens": 100000}, None, 400,
         "invalid_value"),
        ("prompt longer than the context", "POST", "/v1/completions", {"prompt": long_prompt, "max_tokens": 4}, None,
         400, "context_length_exceeded"),
        ("unknown model", "POST", "/v1/completions", {"model": "gpt-9", "prompt": "a"}, None, 404, "model_not_found"),
        ("n > 1", "POST", "/v1/completions", {"prompt": "a", "n": 2}, None, 400, "unsupported_parameter"),
        ("tools", "POST", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, None, 400,
         "unsupported_parameter"),
        ("response_format json", "POST", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}, None, 400,
         "unsupported_parameter"),
        ("stop wrong type", "POST", "/v1/completions", {"prompt": "a", "stop": 3}, None, 400, "invalid_type"),
        ("stream not a bool", "POST", "/v1/completions", {"prompt": "a", "stream": "yes"}, None, 400, "invalid_type"),
        ("presence_penalty out of range", "POST", "/v1/completions", {"prompt": "a", "presence_penalty": 2.5}, None,
         400, "invalid_value"),
        ("frequency_penalty a string", "POST", "/v1/completions", {"prompt": "a", "frequency_penalty": "x"}, None, 400,
         "invalid_type"),
        ("top_logprobs > 20", "POST", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21}, None, 400,
         "invalid_value"),
        ("top_logprobs without logprobs", "POST", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, None, 400, "invalid_value"),
        ("chat logprobs not a bool", "POST", "/v1/chat/completions",
         {"messages": [{"role": "user", "content": "x"}], "logprobs": 3}, None, 400, "invalid_type"),
        ("legacy logprobs > 20", "POST", "/v1/completions", {"prompt": "a", "logprobs": 50}, None, 400, "invalid_value"),
        ("prompt token id beyond the vocabulary", "POST", "/v1/completions", {"prompt": [1, 99999]}, None, 400,
         "invalid_value"),
        ("prompt token id negative", "POST", "/v1/completions", {"prompt": [[1, -2]]}, None, 400, "invalid_value"),
        ("prompt token ids mixed with text", "POST", "/v1/completions", {"prompt": [1, "a"]}, None, 400,
         "invalid_type"),
        ("two prompts of token ids", "POST", "/v1/completions", {"prompt": [[1, 2], [3]]}, None, 400,
         "unsupported_parameter"),
        ("empty prompt of token ids", "POST", "/v1/completions", {"prompt": []}, None, 400, "invalid_value"),
        ("non-UTF-8 body", "POST", "/v1/completions", b'{"prompt": "\xff\xfe"}', None, 400, "invalid_json"),
        ("huge body", "POST", "/v1/completions", b'{"prompt": "' + b"a" * (5 << 20) + b'"}', None, 413,
         "request_too_large"),
        ("missing API key", "POST", "/v1/completions", {"prompt": "a"}, {"Authorization": ""}, 401, "invalid_api_key"),
        ("bad API key", "GET", "/v1/models", None, {"Authorization": "Bearer sk-wrong"}, 401, "invalid_api_key"),
        ("API key one char short", "GET", "/metrics", None, {"Authorization": "Bearer " + KEY[:-1]}, 401,
         "invalid_api_key"),
        ("wrong method", "GET", "/v1/chat/completions", None, None, 405, "method_not_allowed"),
        ("wrong method on models", "DELETE", "/v1/models", None, None, 405, "method_not_allowed"),
        ("unknown path", "GET", "/v2/everything", None, None, 404, "not_found"),
        ("unknown model id", "GET", "/v1/models/gpt-9", None, None, 404, "model_not_found"),
        ("tokenize without content", "POST", "/tokenize", {"text": "a"}, None, 400, "invalid_type"),
        ("detokenize bad id", "POST", "/detokenize", {"tokens": [1, -4]}, None, 400, "invalid_value"),
    ]
    check(len(cases) >= 15, "at least 15 bad-input cases")
    for what, method, path, body, hdr, want_status, want_code in cases:
        raw = body if isinstance(body, bytes) else None
        try:
            st, h, out = c.request(method, path, None if raw is not None else body, headers=hdr, raw=raw)
        except (ConnectionError, http.client.HTTPException) as e:
            check(False, f"{what}: connection error {e!r}")
            continue
        try:
            j = json.loads(out)
        except ValueError:
            j = None
        ok = check(st == want_status, f"{what}: status {st}, want {want_status} ({out[:200]!r})")
        if ok and check(isinstance(j, dict) and isinstance(j.get("error"), dict), f"{what}: error JSON {out[:200]!r}"):
            e = j["error"]
            check(isinstance(e.get("message"), str) and e["message"] and "type" in e and "param" in e and "code" in e,
                  f"{what}: OpenAI error shape {e}")
            check(e.get("code") == want_code, f"{what}: code {e.get('code')}, want {want_code}")
        if want_status == 401:
            check(h.get("WWW-Authenticate") == "Bearer", f"{what}: WWW-Authenticate")
        # the server keeps serving after each
        st2, _, _ = c.request("GET", "/health")
        check(st2 == 200, f"after {what}: /health {st2}")
    # the field at fault is named
    st, _, r = c.json("POST", "/v1/completions", {"prompt": "a", "top_p": "x"})
    check(st == 400 and r["error"]["param"] == "top_p" and "top_p" in r["error"]["message"], f"param named: {r}")
    st, _, r = c.json("POST", "/v1/completions", {"prompt": [5, 6, 70000]})
    check(st == 400 and r["error"]["param"] == "prompt" and "prompt[2]" in r["error"]["message"], f"id named: {r}")
    # unknown fields are ignored
    st, _, r = c.json("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2, "frobnicate": {"x": 1}, "user": "u"})
    check(st == 200 and r["usage"]["completion_tokens"] == 2, f"unknown fields ignored: {st} {r}")


def api_key_and_misc(c, port):
    anon = Client(port)
    st, _, r = anon.json("GET", "/health")
    check(st == 200 and r == {"status": "ok"}, f"/health without a key: {st} {r}")
    st, _, _ = anon.json("GET", "/")
    check(st == 401, f"web page needs the key: {st}")
    st, _, r = c.json("GET", "/v1/models")
    check(st == 200 and r["object"] == "list" and r["data"][0]["id"] == "tiny-relu-llama-f16", f"models {r}")
    meta = r["data"][0]["meta"]
    check(meta["chat_template"] == "chatml" and meta["chat_template_source"] == "fallback" and "warning" in meta,
          f"fallback template reported: {meta}")
    st, _, r = c.json("POST", "/tokenize", {"content": "ROMEO: hi"})
    check(st == 200 and all(isinstance(t, int) for t in r["tokens"]), f"tokenize {r}")
    p = run("tokenize", "-m", model, "-p", "ROMEO: hi")
    check([int(x) for x in p.stdout.split()] == r["tokens"], f"tokenize = pictl tokenize ({p.stdout!r})")
    st, _, d = c.json("POST", "/detokenize", {"tokens": r["tokens"][1:]})
    check(st == 200 and d["content"].strip() == "ROMEO: hi", f"detokenize {d}")
    st, _, r = c.json("GET", "/api/status")
    check(st == 200 and r["state"] == "serving" and "gpud" in r["stages"] and len(r["slots"]) == 16, f"status {r}")
    # /metrics in the Prometheus text format, read by its reference parser
    st, h, text = c.request("GET", "/metrics")
    check(st == 200 and h.get("Content-Type", "").startswith("text/plain"), "metrics content type")
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-prometheus-client
        from prometheus_client.parser import text_string_to_metric_families
    fams = {f.name: f for f in text_string_to_metric_families(text.decode())}
    for name in ("pinfer_http_requests", "pinfer_time_to_first_token_seconds", "pinfer_generated_tokens",
                 "pinfer_queue_depth", "pinfer_slots_busy", "pinfer_stage_restarts", "pinfer_predictor_recall",
                 "pinfer_http_request_duration_seconds", "pinfer_kv_cache_used_tokens", "pinfer_stage_step_seconds"):
        check(name in fams, f"metric family {name} in /metrics")
    # the Grafana dashboard queries only what /metrics really exports
    dash = os.path.join(os.environ.get("PINFER_SOURCE", "."), "deploy", "grafana", "pinfer-dashboard.json")
    import re
    exported = set(fams) | {n + "_total" for n in fams}
    for p in json.load(open(dash))["panels"]:
        for t in p["targets"]:
            for n in re.findall(r"\b(pinfer_[a-z_]+)", t["expr"]):
                n = re.sub(r"_(bucket|sum|count)$", "", n)
                check(n in exported, f"dashboard metric {n} is in /metrics")
    reqs = {(s.labels["endpoint"], s.labels["code"]): s.value for s in fams["pinfer_http_requests"].samples}
    check(reqs.get(("/v1/completions", "200"), 0) >= 1 and reqs.get(("/v1/completions", "400"), 0) >= 5,
          f"requests by status: {reqs}")
    gen = [s.value for s in fams["pinfer_generated_tokens"].samples if s.name.endswith("_total")]
    check(gen and gen[0] > 0, "generated tokens counted")
    ttft = [s.value for s in fams["pinfer_time_to_first_token_seconds"].samples if s.name.endswith("_count")]
    check(ttft and ttft[0] > 0, "ttft observed")


def disconnect_frees_slot(c, name):
    # read the first chunk of a long stream, then drop the connection
    def on_chunk(ev, conn):
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.sock.close()
        raise ConnectionAbortedError
    try:
        c.stream("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 200, "temperature": 0, "stream": True}, on_chunk)
    except (ConnectionAbortedError, OSError, http.client.HTTPException):
        pass
    freed = wait_for(lambda: status(name)["requests"] == [], 60, 0.1)
    check(freed, f"slot freed after the client left: {status(name)['requests']}")
    st, _, r = c.json("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2})
    check(st == 200, "serving after a disconnect")


def disconnect_while_queued(c, name):
    """16 long requests take every slot; a 17th waits in the supervisor's queue, and its client leaves:
    apid gives the ticket to its reaper, which frees the slot the request gets later."""
    # long enough that the 16 still hold their slots when the 17th arrives on a loaded machine (at 60
    # tokens they could all finish between the status poll and the 17th's send)
    body = {"prompt": "ROMEO:", "max_tokens": 240, "temperature": 0, "ignore_eos": True}
    waits_before = status(name).get("slot_waits", 0)
    th = [threading.Thread(target=lambda: c.json("POST", "/v1/completions", body)) for _ in range(16)]
    for t in th:
        t.start()
    full = wait_for(lambda: len(status(name)["requests"]) >= 16, 30, 0.02)
    s = socket.create_connection(("127.0.0.1", c.port))
    data = json.dumps({"prompt": "queued", "max_tokens": 4}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode() +
              b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    # the supervisor counts every request that had to wait for a slot: a count, not a poll that a
    # fast (or a loaded) machine can miss
    waited = wait_for(lambda: status(name).get("slot_waits", 0) > waits_before, 10, 0.05)
    s.close()
    for t in th:
        t.join(120)
    check(full, "16 requests hold every slot")
    check(waited, f"the 17th waited in the supervisor's queue: slot_waits {status(name).get('slot_waits')}, "
                  f"before {waits_before}")
    check(wait_for(lambda: (lambda st: st["requests"] == [] and not st.get("queued"))(status(name)), 60, 0.1),
          f"the left request's slot and ticket were freed: {status(name)['requests']} {status(name).get('queued')}")


def merge_legacy_lp(events):
    """The legacy logprobs of a streamed text completion's chunks, concatenated."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for ev in events:
        for ch in ev.get("choices", []):
            if ch.get("logprobs"):
                for k in out:
                    out[k] += ch["logprobs"][k]
    return out


def logprobs_penalties_ids(c):
    """logprobs in OpenAI's shapes (chat and legacy, streamed and not), which distribution they come
    from, the frequency/presence penalties, and prompts given as token ids."""
    import math
    msgs = [{"role": "user", "content": "Wherefore art thou?"}]
    n = 12
    body = {"messages": msgs, "max_tokens": n, "temperature": 0, "logprobs": True, "top_logprobs": 3}
    st, _, r = c.json("POST", "/v1/chat/completions", body)
    if not check(st == 200, f"chat logprobs: {st} {r}"):
        return
    ch = r["choices"][0]
    lp = ch["logprobs"]
    check(set(lp) == {"content", "refusal"} and lp["refusal"] is None, f"chat logprobs keys {set(lp)}")
    ents = lp["content"]
    check(len(ents) == r["usage"]["completion_tokens"] == n, f"{len(ents)} entries for {n} tokens")
    check("".join(e["token"] for e in ents) == ch["message"]["content"], "the entries' tokens spell the content")
    for e in ents:
        check(set(e) == {"token", "logprob", "bytes", "top_logprobs"}, f"entry keys {set(e)}")
        check(bytes(e["bytes"]).decode("utf-8", "replace") == e["token"], f"bytes of {e}")
        top = e["top_logprobs"]
        check(len(top) == 3 and all(set(t) == {"token", "logprob", "bytes"} for t in top), f"top_logprobs {top}")
        check(all(top[k]["logprob"] >= top[k + 1]["logprob"] for k in range(2)), "top_logprobs most likely first")
        # greedy without penalties: the sampled token is the most likely one
        check(top[0]["token"] == e["token"] and top[0]["logprob"] == e["logprob"] and e["logprob"] <= 0,
              f"greedy token is top 1: {e}")
        check(sum(math.exp(t["logprob"]) for t in top) <= 1 + 1e-5, "probabilities sum to at most 1")
    # streamed: the chunks' entries are the non-streamed ones
    st, ev, done = c.stream("/v1/chat/completions", dict(body, stream=True))
    sent = [e for x in ev for chc in x["choices"] if chc.get("logprobs") for e in chc["logprobs"]["content"]]
    check(done and sent == ents, f"streamed chat logprobs = non-streamed ({len(sent)} vs {len(ents)})")
    check(all(chc["logprobs"] is None for x in ev for chc in x["choices"] if not chc["delta"].get("content")),
          "chunks without text carry logprobs null")
    # the distribution is the model's (log-softmax at temperature 1 after penalties), not the sampler
    # chain's: the first token's candidates are the same at any temperature and top_k
    st, _, r2 = c.json("POST", "/v1/chat/completions", dict(body, temperature=1.7, top_k=2, seed=3, max_tokens=1))
    check(st == 200 and r2["choices"][0]["logprobs"]["content"][0]["top_logprobs"] == ents[0]["top_logprobs"],
          f"top_logprobs independent of temperature/top_k: {r2}")
    # without logprobs: null, as before
    st, _, r3 = c.json("POST", "/v1/chat/completions", {"messages": msgs, "max_tokens": 2})
    check(st == 200 and r3["choices"][0]["logprobs"] is None, "logprobs null when not asked")

    # legacy text completions: logprobs N
    body = {"prompt": "ROMEO:", "max_tokens": n, "temperature": 0, "logprobs": 2}
    st, _, r = c.json("POST", "/v1/completions", body)
    if check(st == 200, f"completion logprobs: {st} {r}"):
        ch = r["choices"][0]
        lp = ch["logprobs"]
        check(set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, f"legacy keys {set(lp)}")
        check(all(len(lp[k]) == n for k in lp), f"legacy lengths {[len(v) for v in lp.values()]}")
        check("".join(lp["tokens"]) == ch["text"], "legacy tokens spell the text")
        offs = [len("ROMEO:") + len("".join(lp["tokens"][:i])) for i in range(n)]  # from the prompt's start
        check(lp["text_offset"] == offs, f"text_offset {lp['text_offset']} != {offs}")
        for t, l, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
            check(1 <= len(top) <= 2 and top.get(t) == l and max(top.values()) == l, f"legacy top {t!r} {l} {top}")
        st, ev, done = c.stream("/v1/completions", dict(body, stream=True))
        check(done and merge_legacy_lp(ev) == lp, "streamed legacy logprobs = non-streamed")
        # a stop string: only the tokens of the answer's text
        full = ch["text"]
        stop = full[len(full) // 2:len(full) // 2 + 2]
        if stop.strip():
            st, _, rs = c.json("POST", "/v1/completions", dict(body, stop=stop))
            t = rs["choices"][0]["text"]
            toks = rs["choices"][0]["logprobs"]["tokens"]
            check(st == 200 and "".join(toks).startswith(t) and len("".join(toks[:-1])) < max(len(t), 1) and
                  len(toks) < n, f"logprobs cut with the stop string {stop!r}: {t!r} {toks}")

    # frequency/presence penalties: greedy, deterministic, and they change the text of a model that
    # repeats itself; the sampled token's logprob is that of the penalized distribution
    base = {"prompt": "ROMEO:", "max_tokens": 48, "temperature": 0, "ignore_eos": True}
    st, _, plain = c.json("POST", "/v1/completions", base)
    pen = dict(base, frequency_penalty=1.5, presence_penalty=1.0)
    st1, _, p1 = c.json("POST", "/v1/completions", pen)
    st2, _, p2 = c.json("POST", "/v1/completions", pen)
    if check(st == st1 == st2 == 200, f"penalties: {st1} {p1}"):
        t0, t1 = plain["choices"][0]["text"], p1["choices"][0]["text"]
        check(t1 == p2["choices"][0]["text"], "penalized greedy is deterministic")
        check(t1 != t0, f"penalties change the greedy text: {t0!r}")
        st, _, pl = c.json("POST", "/v1/completions", dict(pen, logprobs=1))
        lp = pl["choices"][0]["logprobs"]
        check(pl["choices"][0]["text"] == t1 and all(top.get(t) == l for t, l, top in
              zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"])), "penalized greedy = top 1 of its logprobs")

    # prompts as token ids: the ids /tokenize gives (BOS included) = the string prompt
    st, _, tk = c.json("POST", "/tokenize", {"content": "ROMEO:"})
    ids = tk["tokens"]
    st, _, want = c.json("POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0})
    for form in (ids, [ids]):
        st, _, r = c.json("POST", "/v1/completions", {"prompt": form, "max_tokens": 8, "temperature": 0})
        check(st == 200 and r["choices"][0]["text"] == want["choices"][0]["text"] and
              r["usage"]["prompt_tokens"] == len(ids), f"prompt {form}: {r}")


def kill_apid_mid_stream(c, name):
    s0 = status(name)
    apid0, gpud0 = s0["stages"]["apid"], s0["stages"]["gpud"]
    dropped = []

    def on_chunk(ev, conn):
        if not dropped:
            dropped.append(1)
            os.kill(apid0["pid"], signal.SIGKILL)
    # a long request ahead keeps gpud busy, so the streamed one is still waiting for its first token
    # when its first chunk (the role) arrives and apid is killed
    def block():
        try:
            c.json("POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 250, "ignore_eos": True})
        except (OSError, http.client.HTTPException):
            pass  # it went through the apid we kill
    blocker = threading.Thread(target=block)
    blocker.start()
    time.sleep(0.05)
    try:
        st, ev, done = c.stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                         "max_tokens": 200, "stream": True, "ignore_eos": True},
                                on_chunk)
        check(st == 200 and dropped, f"the stream started: {st} {ev[:1]}")
        check(not done, "a stream whose apid was killed does not end with [DONE]")
    except (OSError, http.client.HTTPException):
        pass  # the connection dropped: what the client should see
    back = wait_for(lambda: (lambda s: s and s["stages"]["apid"]["restarts"] == apid0["restarts"] + 1 and
                             s["stages"]["apid"]["state"] == "ready")(status(name)), 30, 0.1)
    check(back, f"apid restarted: {status(name)['stages']['apid']}")
    ok = wait_for(lambda: c.request("GET", "/health")[0] == 200 if _port_open(c.port) else False, 30, 0.1)
    check(ok, "health after the restart")
    st, _, r = c.json("POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0})
    check(st == 200 and r["usage"]["completion_tokens"] == 8, f"next request after the restart: {st} {r}")
    s1 = status(name)
    check(s1["stages"]["gpud"]["pid"] == gpud0["pid"] and s1["stages"]["gpud"]["restarts"] == gpud0["restarts"],
          "the engine (gpud) did not restart")
    freed = wait_for(lambda: status(name)["requests"] == [], 60, 0.1)
    check(freed, "the dead apid's slot was freed by the supervisor")
    blocker.join(60)


def kill_gpud_mid_stream(c, name):
    """kill -9 of gpud during a stream: the supervisor restarts it, it replays the slot, and the stream
    completes with the same text."""
    # sampled, with the penalties and log-probabilities: a replay rebuilds the penalty history from
    # the slot's tokens and the draw is a function of (seed, position), so nothing may change
    body = {"prompt": "ROMEO:", "max_tokens": 250, "temperature": 0.9, "seed": 11, "ignore_eos": True,
            "frequency_penalty": 0.4, "presence_penalty": 0.3, "repeat_penalty": 1.1, "logprobs": 2}
    st, _, r = c.json("POST", "/v1/completions", body)
    want = r["choices"][0]["text"]
    want_lp = r["choices"][0]["logprobs"]
    g0 = status(name)["stages"]["gpud"]
    seen = []

    def on_chunk(ev, conn):
        seen.append(1)
        if len(seen) == 2:  # the first text chunk: 250 tokens are far from done
            os.kill(g0["pid"], signal.SIGKILL)
    st, ev, done = c.stream("/v1/completions", dict(body, stream=True), on_chunk)
    text, fin = reassemble(ev, False)
    check(done and text == want and fin == "length", f"stream across a gpud kill: {text!r} != {want!r}")
    got_lp = merge_legacy_lp(ev)
    check(got_lp == want_lp, f"log-probabilities across a gpud kill differ: {str(got_lp)[:300]} != {str(want_lp)[:300]}")
    check(wait_for(lambda: (lambda g: g["restarts"] == g0["restarts"] + 1 and g["state"] == "ready")(
        status(name)["stages"]["gpud"]), 30, 0.1), "gpud was restarted")


def _port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def apid_rss(name):
    pid = status(name)["stages"]["apid"]["pid"]
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def load_round(c, clients=8, per=50):
    errors = []

    def worker(i):
        for k in range(per):
            body = {"prompt": f"ROMEO {i} {k}:", "max_tokens": 4, "temperature": 0}
            try:
                if (i + k) % 2:
                    st, ev, done = c.stream("/v1/completions", dict(body, stream=True))
                    if st != 200 or not done:
                        errors.append((i, k, st, "stream"))
                else:
                    st, _, r = c.json("POST", "/v1/completions", body)
                    if st != 200 or r["usage"]["completion_tokens"] != 4:
                        errors.append((i, k, st, r))
            except Exception as e:  # any failure counts
                errors.append((i, k, repr(e)))
    th = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    t0 = time.time()
    for t in th:
        t.start()
    for t in th:
        t.join()
    return errors, time.time() - t0


def load_test(c, name):
    errors, dt = load_round(c)
    check(not errors, f"load round 1: {len(errors)} failed: {errors[:5]}")
    print(f"load: 8 clients x 50 requests in {dt:.1f} s")
    if rss_only:
        r1 = apid_rss(name)
        errors, dt = load_round(c)
        r2 = apid_rss(name)
        check(not errors, f"load round 2: {len(errors)} failed")
        print(f"apid RSS after round 1: {r1} kB, after round 2: {r2} kB (round 2: {dt:.1f} s)")
        check(r1 > 0 and r2 > 0, "apid's RSS was read")
        check(r2 <= r1 * 1.10 + 1024, f"apid RSS grew from {r1} kB to {r2} kB over an identical round")


def queue_timeout_body(name_b):
    """A standalone apid on an instance without --http: a queue of 1, a 2 s timeout, a small body."""
    port = free_port()
    log = open(os.path.join(runtime_dir(name_b), "logs", "apid-standalone.log"), "w")
    p = subprocess.Popen([apid_exe, "--instance", name_b, "--listen", f"127.0.0.1:{port}", "--max-queue", "1",
                          "--timeout", "2", "--max-body", "2048"], stdout=log, stderr=log)
    try:
        c = Client(port)
        check(wait_for(lambda: _port_open(port) and c.request("GET", "/health")[0] == 200, 30, 0.1), "standalone up")
        for k in ("max_tokens", "max_completion_tokens"):
            st, _, r = c.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                                                               k: 1100, "logprobs": True})
            check(st == 400 and r["error"]["param"] == k and "1024" in r["error"]["message"],
                  f"logprobs with {k} beyond the table: {st} {r}")
        held = threading.Event()
        res = {}

        def long_one():
            def on_chunk(ev, conn):
                held.set()
            res["long"] = c.stream("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 250, "stream": True,
                                                       "ignore_eos": True}, on_chunk)
        t = threading.Thread(target=long_one)
        t.start()
        check(held.wait(30), "first request streaming")
        st, h, r = c.json("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2})
        check(st == 429 and h.get("Retry-After") == "1" and r["error"]["code"] == "rate_limit_exceeded",
              f"queue full: {st} {h.get('Retry-After')} {r}")
        t.join(60)
        st, ev, done = res.get("long", (0, [], False))
        # 250 tokens take longer than 2 s only on a slow machine: either it finished, or it timed out cleanly
        if not done or not any(e.get("choices") and e["choices"][0].get("finish_reason") for e in ev):
            check(ev and "error" in ev[-1] and ev[-1]["error"]["code"] == "timeout", f"timeout event {ev[-1:]}")
        st, _, r = c.json("POST", "/v1/completions", {"prompt": "x" * 4000})
        check(st == 413, f"body limit: {st}")
        check(wait_for(lambda: status(name_b)["requests"] == [], 60, 0.1), "standalone: slots freed")
        st, _, r = c.json("POST", "/v1/completions", {"prompt": "a", "max_tokens": 2})
        check(st == 200, f"serving after 429/413/timeout: {st} {r}")
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
        log.close()


PHI3_TEMPLATE = ("{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + "
                 "'<|end|>\\n'}}{% endfor %}{{ '<|assistant|>\\n' }}")


def templates_from_model(tmpdir):
    stats = os.path.join(tmpdir, "stats.json")
    p = run("run", "-m", model, "-p", "ROMEO:", "--temp", "0", "-n", "8", "--ignore-eos", "-t", "1", "-c", "256",
            "--json-stats", stats)
    if not check(p.returncode == 0, f"pictl run --json-stats: {p.stderr!r}"):
        return
    gen = json.load(open(stats))["tokens"]
    prompt_ids = [int(x) for x in run("tokenize", "-m", model, "-p", "ROMEO:").stdout.split()]
    k = next(i for i in range(2, len(gen)) if gen[i] not in gen[:i] and gen[i] not in prompt_ids)
    tmodel = os.path.join(tmpdir, "tiny-phi3.gguf")
    m = subprocess.run([maker, "--make", model, tmodel, str(gen[k]), "<|end|>", PHI3_TEMPLATE], capture_output=True)
    if not check(m.returncode == 0, f"make the template model: {m.stderr!r}"):
        return
    want = pictl_greedy("ROMEO:", k)  # the text before the end-of-turn token
    for flag, fam, src in ((None, "phi3", "model"), ("llama3", "llama3", "flag")):
        name, port = f"{tag}t{fam}", free_port()
        args = ["start", "-m", tmodel, "--name", name, "-t", "1", "-c", "256", "--http", f"127.0.0.1:{port}"]
        if flag:
            args += ["--chat-template", flag]
        try:
            p = run(*args)
            if not check(p.returncode == 0, f"start {tmodel}: {p.stderr!r}"):
                continue
            c = Client(port)
            wait_for(lambda: _port_open(port) and c.request("GET", "/health")[0] == 200, 30, 0.1)
            st, _, r = c.json("GET", "/v1/models")
            meta = r["data"][0]["meta"] if st == 200 else {}
            check(meta.get("chat_template") == fam and meta.get("chat_template_source") == src and "warning" not in meta,
                  f"template {fam} from {src}: {meta}")
            if flag:
                continue
            st, _, r = c.json("POST", "/v1/completions", {"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0})
            ch = r["choices"][0] if st == 200 else {}
            check(ch.get("finish_reason") == "stop" and ch.get("text") == want and
                  r["usage"]["completion_tokens"] == k + 1, f"stops at the end-of-turn token: {r} (want {want!r})")
            st, ev, done = c.stream("/v1/completions", {"prompt": "ROMEO:", "max_tokens": 8, "temperature": 0,
                                                        "stream": True})
            check(reassemble(ev, False) == (want, "stop") and done, f"streamed stop at end of turn: {ev[-2:]}")
            st, _, r = c.json("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                               "max_tokens": 4, "temperature": 0})
            check(st == 200 and r["choices"][0]["finish_reason"] in ("stop", "length"), f"phi3 chat: {st} {r}")
            check(wait_for(lambda: status(name)["requests"] == [], 60, 0.1), "early-stopped requests released")
        finally:
            cleanup(name)


def main():
    name, name_b = tag + "a", tag + "b"
    port = free_port()
    try:
        p = run("start", "-m", model, "--name", name, "-t", "1", "-c", "256", "--http", f"127.0.0.1:{port}",
                "--api-key", KEY)
        if not check(p.returncode == 0, f"start --http: {p.stderr!r}"):
            return
        c = Client(port, KEY)
        check(wait_for(lambda: _port_open(port) and c.request("GET", "/health")[0] == 200, 30, 0.1), "health 200")
        st = status(name)
        check("apid" in st["stages"] and st["stages"]["apid"]["state"] == "ready", f"apid is a stage: {st['stages']}")
        if rss_only:
            load_test(c, name)
            return
        cfg = os.path.join(runtime_dir(name), "apid.json")
        check(os.stat(cfg).st_mode & 0o777 == 0o600, "apid.json is 0600 (it holds the key)")
        # a second instance on the same address: apid cannot listen, so its start fails at once with
        # apid's message and leaves nothing (before, it said 'serving' and ran without its HTTP API)
        t0 = time.time()
        p = run("start", "-m", model, "--name", tag + "c", "-t", "1", "-c", "256", "--http", f"127.0.0.1:{port}")
        err = p.stderr.decode(errors="replace")
        check(p.returncode != 0 and "the instance did not start: apid cannot start" in err and "cannot listen" in err
              and time.time() - t0 < 10,
              f"start --http on a busy port: rc {p.returncode} in {time.time() - t0:.1f} s, {err[-300:]!r}")
        check(status(tag + "c") is None, "nothing of the failed instance is left")
        cleanup(tag + "c")
        # apid's settings refused: the start fails at once with apid's own words
        for args, needle in (([f"127.0.0.1:{free_port()}", "--chat-template", "nope"], "unknown chat template 'nope'"),
                             (["127.0.0.1:99999"], "the port must be 1..65535")):
            p = run("start", "-m", model, "--name", tag + "c", "-t", "1", "-c", "256", "--http", *args)
            err = p.stderr.decode(errors="replace")
            check(p.returncode != 0 and "apid cannot start" in err and needle in err,
                  f"start --http {' '.join(args)}: rc {p.returncode}, {err[-300:]!r}")
            cleanup(tag + "c")
        for fn in (greedy_and_streams, logprobs_penalties_ids, lambda c_: pictl_chat_matches(c_, name), lambda c_: bad_inputs(c_, port), lambda c_: api_key_and_misc(c_, port),
                   lambda c_: disconnect_frees_slot(c_, name), lambda c_: load_test(c_, name),
                   lambda c_: disconnect_while_queued(c_, name), lambda c_: kill_gpud_mid_stream(c_, name), lambda c_: kill_apid_mid_stream(c_, name)):
            t0 = time.time()
            try:
                fn(c)
            except Exception as e:
                import traceback
                traceback.print_exc()
                check(False, f"{getattr(fn, '__name__', fn)} raised {e!r}")
            print(f"{getattr(fn, '__name__', 'case')}: {time.time() - t0:.1f} s")
        import tempfile
        with tempfile.TemporaryDirectory() as tmpdir:
            t0 = time.time()
            templates_from_model(tmpdir)
            print(f"templates_from_model: {time.time() - t0:.1f} s")
        # a context beyond the 1024 tokens the log-probability table holds per request
        p = run("start", "-m", model, "--name", name_b, "-t", "1", "-c", "1280")
        if check(p.returncode == 0, f"start b: {p.stderr!r}"):
            check("apid" not in status(name_b)["stages"], "no apid stage without --http")
            queue_timeout_body(name_b)
    finally:
        run("stop", "--name", name, timeout=60)
        check(not os.path.exists(os.path.join(runtime_dir(name), "apid.json")), "stop removes apid.json (the key)")
        cleanup(name)
        cleanup(name_b)
        print(f"{checks} checks, {failures} failures")


main()
sys.exit(1 if failures else 0)
