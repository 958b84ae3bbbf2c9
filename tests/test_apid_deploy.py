#!/usr/bin/env python3
"""test_apid_deploy — deploy/ checked statically (no image registry or cluster is reachable here):
the Kubernetes manifests parse and fit together (selectors, ports, probes on /health, Prometheus
annotations on /metrics, GPU requests, every $(VAR) from the ConfigMap, the claim exists), the
Dockerfile starts from Debian 12 with the project's install script and runs `pictl start --http` on
the port it exposes, every flag they pass is one `pictl start --help` lists, and every metric the
Grafana dashboard queries is one apid exports (the table in apid/metrics.c; test_apid.py also checks
them against a live /metrics).

usage: test_apid_deploy.py PICTL SOURCE_DIR"""
import json, os, re, subprocess, sys

try:
    import yaml
except ImportError:
    sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-yaml
    import yaml

pictl, src = sys.argv[1:3]
d = os.path.join(src, "deploy")
failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", msg, file=sys.stderr)
    return cond


def exported_metrics():
    text = open(os.path.join(src, "apid", "metrics.c")).read()
    table = text[text.index("apid_metric_names[] = {"):]
    table = table[:table.index("};")]
    return set(re.findall(r'"(pinfer_[a-z_]+)"', table))


def dashboard_metrics(path):
    dash = json.load(open(path))
    names = set()
    for p in dash["panels"]:
        for t in p.get("targets", []):
            for n in re.findall(r"\b(pinfer_[a-z_]+)", t["expr"]):
                names.add(re.sub(r"_(bucket|sum|count)$", "", n))
    return names


def main():
    docs = {}
    for f in sorted(os.listdir(os.path.join(d, "k8s"))):
        for doc in yaml.safe_load_all(open(os.path.join(d, "k8s", f))):
            if check(isinstance(doc, dict) and "kind" in doc and "apiVersion" in doc and doc.get("metadata", {}).get("name"),
                     f"{f}: a Kubernetes object"):
                docs[(doc["kind"], doc["metadata"]["name"])] = doc
    dep = next((v for (k, _), v in docs.items() if k == "Deployment"), None)
    svc = next((v for (k, _), v in docs.items() if k == "Service"), None)
    if not check(dep and svc, "a Deployment and a Service"):
        return
    pod = dep["spec"]["template"]
    check(dep["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), "deployment selector")
    check(svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items(), "service selects the pods")
    c = pod["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    check(all(p["targetPort"] in ports or p["targetPort"] in ports.values() for p in svc["spec"]["ports"]), "service ports")
    rp = c["readinessProbe"]["httpGet"]
    check(rp["path"] == "/health" and rp["port"] in ports, f"readiness on /health: {rp}")
    ann = pod["metadata"]["annotations"]
    check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/path") == "/metrics" and
          int(ann.get("prometheus.io/port", 0)) in ports.values(), f"prometheus annotations {ann}")
    check(c["resources"]["requests"].get("nvidia.com/gpu") == 1 and c["resources"]["limits"].get("nvidia.com/gpu") == 1,
          "one GPU per replica")
    cms = [e["configMapRef"]["name"] for e in c.get("envFrom", [])]
    check(cms and all(("ConfigMap", n) in docs for n in cms), f"configmaps {cms} exist")
    keys = set().union(*(docs[("ConfigMap", n)]["data"].keys() for n in cms if ("ConfigMap", n) in docs))
    for v in re.findall(r"\$\((\w+)\)", " ".join(c["args"])):
        check(v in keys, f"$({v}) comes from the ConfigMap")
    for vol in pod["spec"]["volumes"]:
        if "persistentVolumeClaim" in vol:
            check(("PersistentVolumeClaim", vol["persistentVolumeClaim"]["claimName"]) in docs, "claim exists")
    mounts = {m["name"] for m in c["volumeMounts"]}
    check(mounts <= {v["name"] for v in pod["spec"]["volumes"]}, "mounts name volumes")

    df = open(os.path.join(d, "Dockerfile")).read()
    lines = [l for l in df.splitlines() if l.strip() and not l.startswith("#")]
    check(lines[0].strip() in ("FROM debian:12", "FROM debian:bookworm"), f"FROM Debian 12: {lines[0]}")
    check("./scripts/install-deps.sh" in df and os.path.exists(os.path.join(src, "scripts", "install-deps.sh")),
          "installs with the project's script")
    expose = int(re.search(r"^EXPOSE (\d+)", df, re.M).group(1))
    entry = json.loads(re.search(r"^ENTRYPOINT (\[.*\])", df, re.M).group(1))
    cmd = json.loads(re.search(r"^CMD (\[.*\])", df, re.M).group(1))
    check(entry[:2] == ["pictl", "start"] and "--http" in entry, f"entrypoint {entry}")
    check(entry[entry.index("--http") + 1].endswith(f":{expose}") and expose in ports.values(),
          "serves the exposed port, the one the pod declares")
    helptext = subprocess.run([pictl, "start", "--help"], capture_output=True).stdout.decode()
    for flag in [a for a in entry[2:] + cmd + c["args"] if a.startswith("-")]:
        check(re.search(r"(^|[\s,])" + re.escape(flag) + r"\b", helptext) is not None, f"pictl start knows {flag}")

    exported = exported_metrics()
    check(len(exported) >= 20, f"metric table parsed: {sorted(exported)}")
    used = dashboard_metrics(os.path.join(d, "grafana", "pinfer-dashboard.json"))
    check(len(used) >= 10, f"the dashboard queries metrics: {used}")
    for n in sorted(used - exported):
        check(False, f"the dashboard queries {n}, which apid does not export")


main()
print("deploy checks:", "ok" if not failures else f"{failures} failures")
sys.exit(1 if failures else 0)
