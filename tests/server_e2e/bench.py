#!/usr/bin/env python3
"""Server throughput bench for machines without node (python3 standard library only).

The same measurement as bench.mjs: for each level, N concurrent clients loop for S
seconds; each request tokenizes a Harmony-rendered chat prompt (/tokenize), then streams
/v1/completions (SSE) with those token ids, max_tokens tokens, include_usage. Reports one
JSON line per level: requests/s, generated tokens/s (from the usage chunk), time to first
token p50/p90 measured at the client (first chunk with text), latency p50. An idle TTFT
probe (the engine's own timings.ttft_ms from non-streaming chat requests) comes first.

Unlike bench.mjs it does not start a server: point it at one (`brass serve ...`).
  python3 tests/server_e2e/bench.py [--url http://127.0.0.1:8080] [--levels 1,8,32]
                                    [--seconds 20] [--max-tokens 64] [--api-key KEY]
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse


class Client:
    def __init__(self, url, api_key, timeout=600):
        u = urllib.parse.urlparse(url)
        self.host, self.port = u.hostname, u.port or 80
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = "Bearer " + api_key
        self.timeout = timeout

    def conn(self):
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def post_json(self, path, body):
        c = self.conn()
        try:
            c.request("POST", path, body=json.dumps(body), headers=self.headers)
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                raise RuntimeError(f"POST {path}: HTTP {r.status} {data[:300]!r}")
            return json.loads(data)
        finally:
            c.close()

    def get_status(self, path):
        c = self.conn()
        try:
            c.request("GET", path, headers=self.headers)
            r = c.getresponse()
            r.read()
            return r.status
        finally:
            c.close()


def stream_once(cl, i, max_tokens):
    tk = cl.post_json("/tokenize", {"messages": [{"role": "user", "content": f"Request {i}: write a short poem."}]})
    t0 = time.perf_counter()
    body = {"prompt": tk["tokens"], "stream": True, "max_tokens": max_tokens, "seed": i,
            "stream_options": {"include_usage": True}}
    c = cl.conn()
    ttft, tokens = None, 0
    try:
        c.request("POST", "/v1/completions", body=json.dumps(body), headers=cl.headers)
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"/v1/completions: HTTP {r.status} {r.read()[:300]!r}")
        # SSE: events separated by a blank line; each event here is one "data: ..." line.
        buf = b""
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            buf += chunk
            while True:
                cut = buf.find(b"\n\n")
                if cut < 0:
                    break
                line, buf = buf[:cut].decode("utf-8", "replace"), buf[cut + 2:]
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if j.get("usage"):
                    tokens = j["usage"]["completion_tokens"]
                ch = j.get("choices") or []
                if ttft is None and ch and ch[0].get("text"):
                    ttft = (time.perf_counter() - t0) * 1000.0
    finally:
        c.close()
    return {"ms": (time.perf_counter() - t0) * 1000.0, "ttft": ttft, "tokens": tokens}


def ttft_probe(cl, n):
    out = []
    for i in range(n):
        j = cl.post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": f"probe {i}"}], "max_tokens": 1})
        out.append(j["timings"]["ttft_ms"])
    return sorted(out)


def pct(a, p):
    return f"{a[min(len(a) - 1, int(p * len(a)))]:.0f}" if a else "-"


def level(cl, clients, seconds, max_tokens):
    deadline = time.perf_counter() + seconds
    res, errors, lock = [], [], threading.Lock()

    def worker(c):
        k = 0
        while time.perf_counter() < deadline:
            try:
                r = stream_once(cl, c * 1000000 + k, max_tokens)
                with lock:
                    res.append(r)
            except Exception as e:  # keep measuring; report the count and the first error
                with lock:
                    errors.append(str(e))
            k += 1

    ts = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # Like bench.mjs: rates over the nominal window (requests still running at the
    # deadline finish and count, so this slightly favours long requests, as there).
    elapsed = seconds
    tokens = sum(r["tokens"] for r in res)
    ttfts = sorted(r["ttft"] for r in res if r["ttft"] is not None)
    lat = sorted(r["ms"] for r in res)
    out = {"clients": clients, "requests": len(res), "req_per_s": f"{len(res) / elapsed:.2f}",
           "tok_per_s": f"{tokens / elapsed:.1f}", "ttft_p50_ms": pct(ttfts, 0.5), "ttft_p90_ms": pct(ttfts, 0.9),
           "latency_p50_ms": pct(lat, 0.5)}
    if errors:
        out["errors"] = len(errors)
        out["first_error"] = errors[0][:300]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--levels", default="1,8,32")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--wait", type=float, default=0, help="wait up to this many seconds for /health 200 first")
    a = ap.parse_args()
    cl = Client(a.url, a.api_key)
    t_end = time.time() + a.wait
    while True:
        try:
            if cl.get_status("/health") == 200:
                break
        except OSError:
            pass
        if time.time() >= t_end:
            sys.exit(f"bench.py: {a.url}/health is not 200")
        time.sleep(0.5)
    probe = ttft_probe(cl, 10)
    print(f"idle TTFT (engine, prompt ~80 tokens): p50 {probe[5]:.1f} ms", flush=True)
    print(f"max_tokens {a.max_tokens}, {a.seconds:g} s per level", flush=True)
    for c in [int(x) for x in a.levels.split(",")]:
        print(json.dumps(level(cl, c, a.seconds, a.max_tokens)), flush=True)


if __name__ == "__main__":
    main()
