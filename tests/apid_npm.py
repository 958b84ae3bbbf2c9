"""apid_npm — the npm packages the apid tests drive (the official OpenAI SDK, playwright-core),
installed at pinned versions into the build directory (never committed). Their 4.x / 1.49 lines run
on Debian 12's Node.js 18."""
import os, subprocess

PACKAGES = {"openai": "4.95.0", "playwright-core": "1.49.1"}


def ensure(build_dir):
    """Returns the directory holding node_modules, installing what is missing; raises on failure."""
    d = os.path.join(build_dir, "apid-npm")
    os.makedirs(d, exist_ok=True)
    missing = []
    for name, ver in PACKAGES.items():
        pj = os.path.join(d, "node_modules", name, "package.json")
        try:
            import json
            if json.load(open(pj))["version"] == ver:
                continue
        except (OSError, ValueError, KeyError):
            pass
        missing.append(f"{name}@{ver}")
    if missing:
        p = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-save", "--prefix", d, *missing],
                           capture_output=True, timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"npm install {' '.join(missing)} failed: {p.stderr.decode()[-1000:]}")
    return d
