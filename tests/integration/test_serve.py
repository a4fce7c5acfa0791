"""`dsquant serve` driven by real clients on loopback: the openai package
(the seed guide's snippet verbatim, streaming and not, chat and
completions), lm-eval's local-completions with the tokenizer served by us,
raw HTTP for the failure cases, and signals.

What must hold:
- greedy output through the server equals `dsquant generate` (completions
  and chat, streamed and not);
- echoed prompt log probabilities give `dsquant ppl --protocol hf`'s
  perplexity within 0.1%, and lm-eval's loglikelihood_rolling of a document
  equals the sum of `dsquant logits` over the same tokens within 0.1%;
- malformed JSON, wrong types, unimplemented fields, oversized bodies, a
  missing or wrong API key, too long prompts and a full queue get their 4xx;
- 64 concurrent streams all finish; clients that vanish mid-stream free
  their slots; the server's RSS stays bounded;
- SIGTERM during load: every stream ends (finished or with an error chunk)
  and the process exits 0.
"""
import json
import math
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import dsq_testlib as T

problems = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        problems.append(what)


class Server:
    def __init__(self, model, *args, port=0):
        self.p = subprocess.Popen([T.binary(), "serve", model, "--port", str(port), *args],
                                  stderr=subprocess.PIPE, text=True)
        self.port = None
        self.log = []
        deadline = time.time() + 60
        while time.time() < deadline:
            line = self.p.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"serving .* on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                break
        if self.port is None:
            self.p.kill()
            sys.exit("dsquant serve did not start: " + "".join(self.log) + self.p.stderr.read())
        threading.Thread(target=self._drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def _drain(self):
        for line in self.p.stderr:
            self.log.append(line)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return None

    def rss_kib(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0


def http(url, body=None, method=None, headers=None, raw=None):
    """(status, parsed JSON or text, headers)."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"),
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            status, text, hdrs = r.status, r.read().decode(), r.headers
    except urllib.error.HTTPError as e:
        status, text, hdrs = e.code, e.read().decode(), e.headers
    try:
        return status, json.loads(text), hdrs
    except json.JSONDecodeError:
        return status, text, hdrs


def generate(model, prompt, n, chat=False):
    args = ["generate", model, "-p", prompt, "-n", str(n), "--threads", "2"] + (["--chat"] if chat else [])
    out = T.dsquant(*args)
    return out[:-1] if out.endswith("\n") else out


def test_greedy_equals_generate(sv, model):
    from openai import OpenAI
    client = OpenAI(base_url=sv.url + "/v1", api_key="not-needed")
    prompt = "The three primary colors are"
    want = generate(model, prompt, 24)
    got = client.completions.create(model="whatever", prompt=prompt, max_tokens=24, temperature=0)
    check(got.choices[0].text == want, f"completions greedy == dsquant generate ({got.choices[0].text!r} vs {want!r})")
    check(got.usage.completion_tokens == 24 and got.choices[0].finish_reason == "length", "usage and finish_reason")
    parts = [c.choices[0].text for c in client.completions.create(model="x", prompt=prompt, max_tokens=24,
                                                                  temperature=0, stream=True)]
    check("".join(parts) == want, "streamed completions greedy == dsquant generate")
    q = "What is the capital of France?"
    want_chat = generate(model, q, 20, chat=True)
    r = client.chat.completions.create(model="deepseek-ai/DeepSeek-V3", messages=[{"role": "user", "content": q}],
                                       max_tokens=20, temperature=0)
    check(r.choices[0].message.content == want_chat,
          f"chat greedy == dsquant generate --chat ({r.choices[0].message.content!r} vs {want_chat!r})")
    check(r.choices[0].message.role == "assistant" and r.object == "chat.completion", "chat response shape")
    # stop strings end the text before them and are not echoed
    cut = want.split()[2]
    s = client.completions.create(model="x", prompt=prompt, max_tokens=24, temperature=0, stop=[cut, "zzz"])
    check(s.choices[0].text == want[:want.index(cut)] and s.choices[0].finish_reason == "stop",
          f"stop string {cut!r}: {s.choices[0].text!r}")
    # seeded sampling repeats itself
    a = client.completions.create(model="x", prompt=prompt, max_tokens=16, temperature=1.0, seed=7)
    b = client.completions.create(model="x", prompt=prompt, max_tokens=16, temperature=1.0, seed=7)
    check(a.choices[0].text == b.choices[0].text, "same seed, same sample")
    # chat log probabilities
    lp = client.chat.completions.create(model="x", messages=[{"role": "user", "content": q}], max_tokens=4,
                                        temperature=0, logprobs=True, top_logprobs=3)
    c = lp.choices[0].logprobs.content
    check(len(c) == 4 and all(len(t.top_logprobs) == 3 for t in c) and
          all(abs(t.logprob - t.top_logprobs[0].logprob) < 1e-6 for t in c), "chat logprobs: greedy is the top one")


def test_seed_snippet(sv):
    """The seed guide's client code, unchanged but for the port when 8000 is taken."""
    from openai import OpenAI
    base = "http://localhost:8000/v1" if sv.port == 8000 else f"http://localhost:{sv.port}/v1"
    client = OpenAI(base_url=base, api_key="not-needed")
    stream = client.chat.completions.create(
        model="deepseek-ai/DeepSeek-V3",
        messages=[{"role": "user", "content": "Explain quantization in one sentence."}],
        stream=True,
        max_tokens=32,
    )
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    check(len(text) > 0 and finish in ("stop", "length"), f"seed snippet streamed {len(text)} chars, {finish}")


def test_ppl_through_echo(sv, model, work):
    """Echoed prompt logprobs over the hf protocol's windows give dsquant ppl's perplexity."""
    text = T.wiki_excerpt(work, 12000)
    ctx, chunks = 256, 4
    ref = json.loads(T.dsquant("ppl", model, "--data", text, "--protocol", "hf", "--ctx", str(ctx), "--chunks",
                               str(chunks), "--json", "--threads", "2"))
    ids = json.loads(T.dsquant("tokenize", model, "--file", text, "--json"))
    nll, n = 0.0, 0
    for k in range(chunks):
        w = ids[k * ctx:(k + 1) * ctx]
        st, r, _ = http(sv.url + "/v1/completions", {"prompt": w, "max_tokens": 0, "echo": True, "logprobs": 0,
                                                     "temperature": 0})
        lps = r["choices"][0]["logprobs"]["token_logprobs"] if st == 200 else []
        check(st == 200 and len(lps) == ctx and lps[0] is None, f"window {k}: {ctx} echoed logprobs, the first null")
        nll -= sum(lps[1:])
        n += ctx - 1
    ppl = math.exp(nll / n)
    check(abs(ppl / ref["ppl"] - 1) < 1e-3, f"perplexity through the server {ppl:.4f} vs dsquant ppl {ref['ppl']:.4f}")


def test_lm_eval(sv, model, work):
    """lm-eval's local-completions with our /tokenize: loglikelihood_rolling and multiple choice."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    text = open(T.wiki_excerpt(work, 1200), encoding="utf-8").read().strip()
    with open(os.path.join(work, "doc.jsonl"), "w") as f:
        f.write(json.dumps({"text": text}) + "\n")
    with open(os.path.join(work, "mc.jsonl"), "w") as f:
        for q, ch, a in [("The sky on a clear day is", [" blue", " green", " loud"], 0),
                         ("Two plus two equals", [" seven", " four", " ten"], 1),
                         ("Paris is the capital of", [" Japan", " Peru", " France"], 2)]:
            f.write(json.dumps({"question": q, "choices": ch, "label": a}) + "\n")
    tasks = os.path.join(work, "tasks")
    os.makedirs(tasks, exist_ok=True)
    for name, body in [("dsq_doc", "output_type: loglikelihood_rolling\ndoc_to_text: ''\n"
                                   "doc_to_target: '{{text}}'\nmetric_list:\n  - metric: word_perplexity\n"),
                       ("dsq_mc", "output_type: multiple_choice\ndoc_to_text: '{{question}}'\n"
                                  "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{label}}'\n"
                                  "metric_list:\n  - metric: acc\n")]:
        src = os.path.join(work, "doc.jsonl" if name == "dsq_doc" else "mc.jsonl")
        with open(os.path.join(tasks, name + ".yaml"), "w") as f:
            f.write(f"task: {name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {src}\n"
                    f"test_split: test\n{body}")
    res = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=f"base_url={sv.url}/v1/completions,model=dsq,tokenizer_backend=remote,max_length=510,"
                   "num_concurrent=2,max_retries=1,tokenized_requests=True",
        tasks=["dsq_doc", "dsq_mc"], task_manager=TaskManager(include_path=tasks), log_samples=True)
    acc = res["results"]["dsq_mc"].get("acc,none")
    check(acc is not None and 0 <= acc <= 1, f"lm-eval multiple choice through the server: acc {acc}")
    ll = res["samples"]["dsq_doc"][0]["filtered_resps"]
    while isinstance(ll, (list, tuple)):
        ll = ll[0]
    # the same window as lm-eval's remote tokenizer makes: its prefix token (BOS, else EOS) first,
    # every document token scored
    ids = json.loads(T.dsquant("tokenize", model, "--text", text, "--json"))
    ti = http(sv.url + "/tokenizer_info")[1]
    st, info, _ = http(sv.url + "/tokenize", {"prompt": ti["bos_token"] or ti["eos_token"], "add_special_tokens": False})
    toks = info["tokens"] + ids
    out = os.path.join(work, "lg.bin")
    T.dsquant("logits", model, "--tokens", ",".join(map(str, toks)), "-o", out, "--threads", "2")
    vocab = os.path.getsize(out) // 4 // len(toks)
    ref = 0.0
    with open(out, "rb") as f:
        data = f.read()
    for i in range(1, len(toks)):
        ref += struct.unpack_from("<f", data, 4 * ((i - 1) * vocab + toks[i]))[0]
    check(abs(ll - ref) < 1e-4 * abs(ref), f"lm-eval loglikelihood_rolling {ll:.4f} vs dsquant logits {ref:.4f}")


def test_bad_requests(sv):
    u = sv.url + "/v1/completions"
    cases = [
        ("malformed JSON", dict(raw=b"{\"prompt\": "), 400, None),
        ("not an object", dict(raw=b"[1, 2]"), 400, None),
        ("temperature of the wrong type", dict(body={"prompt": "a", "temperature": "hot"}), 400, "temperature"),
        ("max_tokens negative", dict(body={"prompt": "a", "max_tokens": -1}), 400, "max_tokens"),
        ("top_p out of range", dict(body={"prompt": "a", "top_p": 3}), 400, "top_p"),
        ("stop of the wrong type", dict(body={"prompt": "a", "stop": 5}), 400, "stop"),
        ("prompt missing", dict(body={"max_tokens": 3}), 400, "prompt"),
        ("token id outside the vocabulary", dict(body={"prompt": [1, 10 ** 9]}), 400, "prompt"),
        ("n > 1", dict(body={"prompt": "a", "n": 2}), 400, "n"),
        ("tools", dict(body={"prompt": "a", "tools": [{"type": "function"}]}), 400, "tools"),
        ("response_format json", dict(body={"prompt": "a", "response_format": {"type": "json_object"}}), 400,
         "response_format"),
        ("too long prompt", dict(body={"prompt": [1] * 600, "max_tokens": 1}), 400, None),
        ("oversized body", dict(raw=b"{\"prompt\": \"" + b"a" * 80000 + b"\"}"), 413, None),
    ]
    for what, kw, want, param in cases:
        st, r, _ = http(u, **kw)
        err = r.get("error", {}) if isinstance(r, dict) else {}
        ok = st == want and isinstance(err.get("message"), str) and err.get("code") == want
        if param:
            ok = ok and err.get("param") == param
        check(ok, f"{what}: {st} {err.get('param')} {err.get('message')}")
    st, r, _ = http(sv.url + "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]})
    check(st == 400 and r["error"]["param"] == "messages", "chat: unknown role -> 400 naming messages")
    st, r, _ = http(sv.url + "/v1/nowhere")
    check(st == 404, "unknown route -> 404")
    st, r, _ = http(u, {"prompt": "Hi", "max_tokens": 2, "temperature": 0, "some_new_field": 1})
    check(st == 200, "unknown fields are ignored")


def test_api_key(model):
    sv = Server(model, "--api-key", "s3cret", "--ctx", "256", "--threads", "1")
    try:
        u = sv.url + "/v1/models"
        check(http(u)[0] == 401, "no API key -> 401")
        check(http(u, headers={"Authorization": "Bearer wrong"})[0] == 401, "wrong API key -> 401")
        st, r, _ = http(u, headers={"Authorization": "Bearer s3cret"})
        check(st == 200 and r["data"][0]["max_model_len"] == 256, "right API key -> 200, max_model_len")
        check(http(sv.url + "/health")[0] == 200, "/health needs no key")
    finally:
        sv.stop()


def stream_raw(port, body, read_chunks=None):
    """POSTs a streamed completion; reads read_chunks SSE events (all when
    None), then drops the connection. Returns (events, closed_early)."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    events = []
    while True:
        line = r.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            events.append(line[6:].rstrip(b"\r\n"))
            if read_chunks is not None and len(events) >= read_chunks:
                c.sock.shutdown(socket.SHUT_RDWR)
                c.close()
                return events, True
            if events[-1] == b"[DONE]":
                break
    c.close()
    return events, False


def metric(sv, name):
    st, text, _ = http(sv.url + "/metrics")
    m = re.search(r"^dsquant:" + re.escape(name) + r"\{[^}]*\} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def test_load(sv, n_streams=64):
    results, lock = [], threading.Lock()

    def one(i):
        ev, _ = stream_raw(sv.port, {"prompt": f"Story number {i}:", "max_tokens": 16, "temperature": 0.8,
                                     "seed": i, "stream": True})
        fin = [json.loads(e)["choices"][0]["finish_reason"] for e in ev if e != b"[DONE]" and json.loads(e)["choices"]]
        with lock:
            results.append(ev[-1:] == [b"[DONE]"] and fin[-1] in ("stop", "length"))

    th = [threading.Thread(target=one, args=(i,)) for i in range(n_streams)]
    for t in th:
        t.start()
    for t in th:
        t.join(300)
    check(len(results) == n_streams and all(results),
          f"{n_streams} concurrent streams finished: {sum(results)}/{n_streams}")
    # clients vanishing mid-stream
    for i in range(8):
        ev, early = stream_raw(sv.port, {"prompt": "Count: 1, 2,", "max_tokens": 200, "ignore_eos": True,
                                         "stream": True}, read_chunks=2)
        check(early and len(ev) >= 2, f"client {i} left after 2 chunks") if i == 0 else None
    deadline = time.time() + 30
    while time.time() < deadline and (metric(sv, "num_requests_running") or 0) > 0:
        time.sleep(0.2)
    check(metric(sv, "num_requests_running") == 0, "vanished clients' slots are freed")
    check(http(sv.url + "/health")[0] == 200, "still healthy after the load")
    rss = sv.rss_kib() / 1024
    check(rss < 1500, f"RSS bounded: {rss:.0f} MiB")
    check((metric(sv, "time_to_first_token_seconds_count") or 0) >= n_streams and (metric(sv, "prompt_tokens_total") or 0) > 0,
          "metrics count the requests")


def test_queue_full(model):
    sv = Server(model, "--parallel", "1", "--max-queue", "1", "--ctx", "512", "--threads", "1")
    try:
        codes, lock = [], threading.Lock()

        def one():
            st, r, h = http(sv.url + "/v1/completions", {"prompt": "x", "max_tokens": 64, "ignore_eos": True})
            with lock:
                codes.append((st, h.get("Retry-After")))

        th = [threading.Thread(target=one) for _ in range(6)]
        for t in th:
            t.start()
        for t in th:
            t.join(120)
        n429 = sum(1 for st, ra in codes if st == 429 and ra)
        check(n429 >= 1 and all(st in (200, 429) for st, _ in codes), f"queue full -> 429 with Retry-After: {codes}")
    finally:
        sv.stop()


def test_sigterm(model):
    sv = Server(model, "--parallel", "2", "--ctx", "512", "--threads", "1", "--grace", "60")
    ends, lock = [], threading.Lock()

    def one(i):
        ev, _ = stream_raw(sv.port, {"prompt": f"Tale {i}:", "max_tokens": 48, "ignore_eos": True, "stream": True})
        last = [json.loads(e) for e in ev if e != b"[DONE]"][-1:] if ev else []
        ok = ev[-1:] == [b"[DONE]"] and last and ("error" in last[0] or last[0]["choices"][0]["finish_reason"])
        with lock:
            ends.append(bool(ok))

    th = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in th:
        t.start()
    time.sleep(1.0)
    rc = sv.stop(signal.SIGTERM)
    for t in th:
        t.join(60)
    check(rc == 0, f"SIGTERM during load: exit status {rc}")
    check(len(ends) == 6 and all(ends), f"every stream ended cleanly: {ends}")


def test_slow_clients(model):
    """Clients that dribble their headers or their body are cut off after
    --request-timeout; the connections they held are freed, a normal
    request still gets through meanwhile, and a long answer is not cut."""
    sv = Server(model, "--ctx", "256", "--threads", "1", "--request-timeout", "2", "--parallel", "1")
    try:
        def dribble(first, then):
            s = socket.create_connection(("127.0.0.1", sv.port), timeout=30)
            s.sendall(first)
            t0 = time.time()
            closed = None
            try:
                for _ in range(40):  # one byte every 0.25 s: never idle, never done
                    s.sendall(then)
                    time.sleep(0.25)
            except OSError:
                closed = time.time() - t0
            if closed is None:
                s.settimeout(5)
                try:
                    closed = time.time() - t0 if s.recv(4096) == b"" else None
                except OSError:
                    closed = time.time() - t0
            s.close()
            return closed
        headers = dribble(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ", b"a")
        check(headers is not None and headers < 6, f"headers dribbled: cut off after {headers} s (timeout 2 s)")
        body = dribble(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: 1000\r\n\r\n{\"prompt\": \"", b"a")
        check(body is not None and body < 6, f"body dribbled: cut off after {body} s (timeout 2 s)")
        # an answer that takes longer than the request timeout is not cut
        st, r, _ = http(sv.url + "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 200,
                                                     "ignore_eos": True})
        check(st == 200 and r["usage"]["completion_tokens"] == 200, "a long answer outlives the request timeout")
        check(http(sv.url + "/health")[0] == 200, "the server answers after the slow clients")
    finally:
        rc = sv.stop()
        check(rc == 0, f"server exit status {rc}")


def main_sanitized(model):
    """--sanitized: the reliability cases against a sanitizer build (DSQ_BINARY):
    any ASan/UBSan report aborts the server, and LeakSanitizer's report at exit
    makes its exit status non-zero, which the checks of exit status 0 catch."""
    sv = Server(model, "--parallel", "4", "--max-queue", "40", "--ctx", "256", "--threads", "2",
                "--max-body", "65536")
    try:
        test_bad_requests(sv)
        test_load(sv, n_streams=16)
        st, r, _ = http(sv.url + "/v1/completions", {"prompt": "Hi", "max_tokens": 4, "echo": True, "logprobs": 3})
        check(st == 200 and len(r["choices"][0]["logprobs"]["tokens"]) >= 5, "echo with logprobs")
        st, r, _ = http(sv.url + "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                                          "max_tokens": 4, "logprobs": True, "top_logprobs": 2})
        check(st == 200, "chat with logprobs")
    finally:
        rc = sv.stop()
        check(rc == 0, f"server exit status {rc} (no sanitizer report, no leak)")
    test_api_key(model)
    test_slow_clients(model)
    test_sigterm(model)


def main():
    model = T.default_model()
    if "--sanitized" in sys.argv:
        T.binary()
        main_sanitized(model)
        if problems:
            sys.exit("FAILED: " + "; ".join(problems))
        print("all sanitized serve checks passed")
        return
    T.binary()
    try:
        import lm_eval  # noqa: F401
        import openai  # noqa: F401
    except ImportError as e:
        T.skip(f"{e.name} is not installed (tests/integration/requirements.txt)")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as work:
        port = 8000
        try:
            socket.create_server(("127.0.0.1", 8000)).close()
        except OSError:
            port = 0
        sv = Server(model, "--parallel", "8", "--max-queue", "80", "--ctx", "512", "--threads", "2",
                    "--max-body", "65536", port=port)
        try:
            check(http(sv.url + "/health")[0] == 200, "/health 200 once loaded")
            st, r, _ = http(sv.url + "/v1/models")
            check(st == 200 and r["data"][0]["owned_by"] and r["data"][0]["max_model_len"] == 512, "/v1/models")
            test_seed_snippet(sv)
            test_greedy_equals_generate(sv, model)
            test_bad_requests(sv)
            test_ppl_through_echo(sv, model, work)
            test_load(sv)
            test_lm_eval(sv, model, work)
        finally:
            rc = sv.stop()
            check(rc == 0, f"server exit status {rc}")
        test_api_key(model)
        test_slow_clients(model)
        test_queue_full(model)
        test_sigterm(model)
        # a port in use: one line naming it, exit 1
        with socket.create_server(("127.0.0.1", 0)) as busy:
            p = busy.getsockname()[1]
            r = subprocess.run([T.binary(), "serve", model, "--port", str(p)], capture_output=True, text=True,
                               timeout=60)
            check(r.returncode == 1 and f"127.0.0.1:{p}" in r.stderr and len(r.stderr.strip().splitlines()) == 1,
                  f"port in use: {r.returncode} {r.stderr.strip()}")
        # a model that fails to load: one line naming it, exit 1, and the port is let go
        bad = os.path.join(work, "missing.gguf")
        r = subprocess.run([T.binary(), "serve", bad, "--port", "0"], capture_output=True, text=True, timeout=60)
        lines = [l for l in r.stderr.splitlines() if l.startswith("dsquant: error:")]
        check(r.returncode == 1 and len(lines) == 1 and "missing.gguf" in lines[0],
              f"a model that fails to load: {r.returncode} {r.stderr.strip()}")
    if problems:
        sys.exit("FAILED: " + "; ".join(problems))
    print("all serve checks passed")


if __name__ == "__main__":
    main()
