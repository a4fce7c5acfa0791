"""Load test of `dsquant serve` against llama.cpp's server (llama-cpp-python's
server extra, same GGUF, same run), in the style of vLLM's
benchmark_serving: streamed completions, TTFT from the first chunk with
text, ITL from every gap between chunks, TPOT = (latency - TTFT) /
(tokens - 1), output tokens from the servers' usage (or the chunk count
where a server sends none). Not part of CI.

    bash bench/setup-serve-bench.sh          # llama-cpp-python[server] into the test venv
    python bench/bench_serve.py --out docs-table.md [--types F32,Q8_0,Q4_K_M] [--clients 1,4,16,64]

Each client sends its requests one after another; a level runs
max(clients, 8) requests of a 64-token WikiText prompt and 64 new
tokens (--new-tokens; EOS ignored: dsquant's ignore_eos, llama.cpp's EOS logit at -inf
through logit_bias). The default model is taken to F32, Q8_0 and Q4_K_M by
`dsquant gguf`. Also measured: `dsquant generate`'s decode tokens/s on the
same file, the single-client target's reference, and at one client the
engine's own inter-token latency from /metrics (the client's share of the
cores left out). Prints one markdown table and the CPU model.
"""
import argparse
import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import dsq_testlib as T  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url, proc, timeout=300):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"server exited with {proc.returncode}")
        for path in ("/health", "/v1/models"):
            try:
                with urllib.request.urlopen(url + path, timeout=2) as r:
                    if r.status == 200:
                        return
            except Exception:
                pass
        time.sleep(0.3)
    sys.exit(f"{url} did not come up")


def start_dsquant(gguf, threads, parallel):
    port = free_port()
    p = subprocess.Popen([T.binary(), "-q", "serve", gguf, "--port", str(port), "--threads", str(threads),
                          "--parallel", str(parallel), "--max-queue", "256", "--ctx", "512"])
    url = f"http://127.0.0.1:{port}"
    wait_health(url, p)
    return p, url


def start_llamacpp(gguf, threads):
    port = free_port()
    p = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", gguf, "--port", str(port),
                          "--n_threads", str(threads), "--n_ctx", "512", "--n_batch", "512"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_health(url, p)
    return p, url


def one_request(url, body):
    """(ttft, itls, latency, tokens) of one streamed completion."""
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    ttft, last, itls, chunks, usage = None, None, [], 0, None
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            d = json.loads(line[6:])
            if d.get("usage"):
                usage = d["usage"]
            if not d.get("choices") or not d["choices"][0].get("text"):
                continue
            now = time.perf_counter()
            if ttft is None:
                ttft = now - t0
            else:
                itls.append(now - last)
            last = now
            chunks += 1
    latency = time.perf_counter() - t0
    tokens = usage["completion_tokens"] if usage else chunks
    return ttft or latency, itls, latency, tokens


def run_level(url, kind, prompt, eos, clients, n_new):
    n_req = max(clients, 8)
    body = {"model": "m", "prompt": prompt, "max_tokens": n_new, "temperature": 0, "stream": True}
    if kind == "dsquant":
        body.update(ignore_eos=True, stream_options={"include_usage": True})
    else:
        body.update(logit_bias={str(eos): -100.0})
    todo = list(range(n_req))
    lock = threading.Lock()
    out = []

    def client():
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            r = one_request(url, body)
            with lock:
                out.append(r)

    t0 = time.perf_counter()
    th = [threading.Thread(target=client) for _ in range(clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    ttft = sorted(r[0] for r in out)
    tpot = sorted((r[2] - r[0]) / (r[3] - 1) for r in out if r[3] > 1)
    toks = sum(r[3] for r in out)

    def pct(xs, q):
        return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else float("nan")

    return {"requests": n_req, "tokens": toks, "tok_s": toks / wall, "ttft_p50": pct(ttft, 50),
            "ttft_p95": pct(ttft, 95), "ttft_p99": pct(ttft, 99), "tpot_p50": pct(tpot, 50), "tpot_p95": pct(tpot, 95),
            "tpot_p99": pct(tpot, 99)}


def server_itl_tok_s(url):
    """1 / mean inter-token latency as the engine itself measured it (/metrics)."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    s = re.search(r"^dsquant:inter_token_latency_seconds_sum\{[^}]*\} (\S+)$", text, re.M)
    c = re.search(r"^dsquant:inter_token_latency_seconds_count\{[^}]*\} (\S+)$", text, re.M)
    return float(c.group(1)) / float(s.group(1)) if s and c and float(s.group(1)) > 0 else float("nan")


def generate_tok_s(gguf, threads, prompt_text, n_new):
    r = subprocess.run([T.binary(), "generate", gguf, "-p", prompt_text, "-n", str(n_new), "--threads", str(threads)],
                       capture_output=True, text=True)
    m = re.search(r"generated (\d+) tokens in ([\d.]+) s \(([\d.]+) tok/s\)", r.stderr)
    return float(m.group(3)) if m else float("nan")


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default="F32,Q8_0,Q4_K_M")
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--parallel", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-peer", action="store_true")
    a = ap.parse_args()
    base = T.default_model()
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    wiki = open(T.wiki_path(), encoding="utf-8").read()[:4000]
    rows = [f"CPU: {cpu_model()}, {a.threads} threads; dsquant --parallel {a.parallel}; "
            f"{a.new_tokens} new tokens per request, 64-token prompt", "",
            "| type | server | clients | requests | gen tok/s | ratio | TTFT p50/p95/p99 ms | TPOT p50/p95/p99 ms |",
            "|---|---|---:|---:|---:|---:|---|---|"]
    with tempfile.TemporaryDirectory() as work:
        for typ in a.types.split(","):
            gguf = os.path.join(work, f"{typ}.gguf")
            T.dsquant("gguf", base, "-o", gguf, "--type", typ, "--allow-requantize")
            ids = json.loads(T.dsquant("tokenize", gguf, "--text", wiki, "--json"))[:64]
            text = T.dsquant("tokenize", gguf, "--decode", "--text", " ".join(map(str, ids))).rstrip("\n")
            eos = json.loads(T.dsquant("info", gguf, "--json")).get("metadata", {}).get(
                "tokenizer.ggml.eos_token_id", 2)
            gen = generate_tok_s(gguf, a.threads, text, a.new_tokens)
            rows.append(f"| {typ} | dsquant generate | 1 | 1 | {gen:.1f} | | | |")
            res = {}
            servers = [("dsquant", lambda: start_dsquant(gguf, a.threads, a.parallel))]
            if not a.no_peer:
                servers.append(("llama.cpp", lambda: start_llamacpp(gguf, a.threads)))
            for kind, start in servers:
                p, url = start()
                try:
                    for c in map(int, a.clients.split(",")):
                        r = run_level(url, kind, text, eos, c, a.new_tokens)
                        res[(kind, c)] = r
                        ratio = ""
                        if kind == "dsquant" and c == 1:
                            itl = server_itl_tok_s(url)
                            ratio = f"{r['tok_s'] / gen:.2f}x gen; engine ITL {itl:.1f} tok/s = {itl / gen:.2f}x"
                        rows.append(f"| {typ} | {kind} | {c} | {r['requests']} | {r['tok_s']:.1f} | {ratio} | "
                                    f"{r['ttft_p50'] * 1e3:.0f} / {r['ttft_p95'] * 1e3:.0f} / {r['ttft_p99'] * 1e3:.0f} | "
                                    f"{r['tpot_p50'] * 1e3:.1f} / {r['tpot_p95'] * 1e3:.1f} / {r['tpot_p99'] * 1e3:.1f} |")
                        print(rows[-1], flush=True)
                finally:
                    p.terminate()
                    p.wait(60)
            for c in map(int, a.clients.split(",")):
                d, l = res.get(("dsquant", c)), res.get(("llama.cpp", c))
                if d and l and l["tok_s"] > 0:
                    rows.append(f"| {typ} | dsquant / llama.cpp | {c} | | {d['tok_s'] / l['tok_s']:.2f}x | | "
                                f"P95 TTFT {d['ttft_p95'] / l['ttft_p95']:.2f}x | |")
    table = "\n".join(rows)
    print(table)
    if a.out:
        with open(a.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
