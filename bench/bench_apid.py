#!/usr/bin/env python3
"""bench_apid — apid under concurrent clients, and its overhead, in one run on one instance.

Cases (one JSON line each):
  clients=1,2,4,8: each client sends REQS streamed completions of N_TOKENS tokens (ignore_eos, greedy)
                   back to back; aggregate generated tokens/s over the wall time, and time to first
                   token p50/p99 over every request (queueing included: it is what a client waits).
  overhead:        the same greedy request (N_TOKENS tokens) through HTTP (non-streamed, one
                   keep-alive connection) and through `pictl generate` (a process per request: it
                   also loads the tokenizer), median wall time of REPS each, and the engine's own
                   decode time for reference.

usage: bench_apid.py PICTL MODEL.gguf [THREADS] [N_TOKENS] [REQS] [REPS]"""
import http.client, json, os, socket, statistics, subprocess, sys, tempfile, threading, time

pictl, model = sys.argv[1:3]
threads = sys.argv[3] if len(sys.argv) > 3 else "2"
n_tok = int(sys.argv[4]) if len(sys.argv) > 4 else 64
reqs = int(sys.argv[5]) if len(sys.argv) > 5 else 8
reps = int(sys.argv[6]) if len(sys.argv) > 6 else 10
name = f"ba{os.getpid()}"
prompt = "ROMEO:\nBut soft, what light through yonder window breaks?"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def stream_one(port, body):
    """Returns (ttft_s, total_s, completion_tokens)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True,
                                                            stream_options={"include_usage": True})),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    ttft, toks = None, 0
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            ev = json.loads(line[6:])
            if ttft is None and ev["choices"] and ev["choices"][0]["text"]:
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                toks = ev["usage"]["completion_tokens"]
    c.close()
    return ttft if ttft is not None else time.perf_counter() - t0, time.perf_counter() - t0, toks


def concurrent(port, clients):
    body = {"prompt": prompt, "max_tokens": n_tok, "temperature": 0, "ignore_eos": True}
    res, lock = [], threading.Lock()

    def worker():
        for _ in range(reqs):
            r = stream_one(port, body)
            with lock:
                res.append(r)
    th = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    ttfts = [r[0] * 1e3 for r in res]
    toks = sum(r[2] for r in res)
    print(json.dumps({"case": "apid_concurrent", "clients": clients, "requests": len(res), "n_tokens": n_tok,
                      "threads": int(threads), "agg_tok_s": round(toks / wall, 1),
                      "ttft_ms_p50": round(pct(ttfts, 0.5), 2), "ttft_ms_p99": round(pct(ttfts, 0.99), 2),
                      "wall_s": round(wall, 2)}), flush=True)


def overhead(port):
    body = json.dumps({"prompt": prompt, "max_tokens": n_tok, "temperature": 0, "ignore_eos": True})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    http_ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        json.loads(r.read())
        http_ms.append((time.perf_counter() - t0) * 1e3)
    c.close()
    gen_ms, eng_ms = [], []
    stats = os.path.join(tempfile.gettempdir(), f"bench-apid-{os.getpid()}.json")
    for _ in range(reps):
        t0 = time.perf_counter()
        p = subprocess.run([pictl, "generate", "--name", name, "-p", prompt, "-n", str(n_tok), "--temp", "0",
                            "--ignore-eos", "--json-stats", stats], capture_output=True, timeout=600)
        gen_ms.append((time.perf_counter() - t0) * 1e3)
        if p.returncode:
            sys.exit(f"pictl generate failed: {p.stderr.decode()[-300:]}")
        try:
            js = json.load(open(stats))
            eng_ms.append(js["prefill_ms"] + js["decode_ms"])
        except (ValueError, KeyError):
            pass
    print(json.dumps({"case": "apid_overhead", "n_tokens": n_tok, "reps": reps,
                      "http_ms_median": round(statistics.median(http_ms), 2),
                      "pictl_generate_ms_median": round(statistics.median(gen_ms), 2),
                      "engine_ms_median": round(statistics.median(eng_ms), 2) if eng_ms else None}), flush=True)


def main():
    port = free_port()
    p = subprocess.run([pictl, "start", "-m", model, "--name", name, "-t", threads, "-c", "512", "--http",
                        f"127.0.0.1:{port}"], capture_output=True, timeout=120)
    if p.returncode:
        sys.exit(f"start failed: {p.stderr.decode()}")
    try:
        end = time.time() + 30
        while time.time() < end:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        stream_one(port, {"prompt": prompt, "max_tokens": 4})  # warm up
        for n in (1, 2, 4, 8):
            concurrent(port, n)
        overhead(port)
    finally:
        subprocess.run([pictl, "stop", "--name", name], capture_output=True, timeout=60)


main()
