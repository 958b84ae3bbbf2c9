#!/usr/bin/env python3
"""test_apid_sdk — the official OpenAI Node SDK (npm `openai`, pinned in apid_npm.py, installed into
the build directory) talks to apid unchanged: apid_sdk.mjs runs its checks against an instance of the
tiny model started with --http and an API key.

usage: test_apid_sdk.py PICTL MODEL.gguf BUILD_DIR"""
import os, shutil, socket, subprocess, sys, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import apid_npm

pictl, model, build = sys.argv[1:4]
here = os.path.dirname(os.path.abspath(__file__))
name = f"sdk{os.getpid()}"
KEY = "sk-sdk-test-key"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    if not shutil.which("node") or not shutil.which("npm"):
        print("FAIL: node and npm are required (scripts/install-deps.sh installs them)", file=sys.stderr)
        return 1
    d = apid_npm.ensure(build)
    port = free_port()
    p = subprocess.run([pictl, "start", "-m", model, "--name", name, "-t", "1", "-c", "256", "--http",
                        f"127.0.0.1:{port}", "--api-key", KEY], capture_output=True, timeout=120)
    if p.returncode != 0:
        print("FAIL: start:", p.stderr.decode(), file=sys.stderr)
        return 1
    try:
        end = time.time() + 30
        while time.time() < end:  # apid loads the tokenizer a moment after the instance serves
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        mid = os.path.splitext(os.path.basename(model))[0]
        env = dict(os.environ, NODE_PATH=os.path.join(d, "node_modules"))
        r = subprocess.run(["node", os.path.join(here, "apid_sdk.mjs"), str(port), KEY, mid], env=env, timeout=240)
        return r.returncode
    finally:
        subprocess.run([pictl, "stop", "--name", name], capture_output=True, timeout=60)


sys.exit(main())
