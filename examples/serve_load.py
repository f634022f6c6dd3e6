"""A small LLM server under load: Poisson arrivals, static batches, the real MindSpore KV-cache decoder.

The model is ``TinyDecoder`` of ``generate_kv.py`` (2 layers, hidden 128, vocabulary 1000, PyNative). One
in-process server loop serves the requests with a simple batching policy, *static batches of up to
--max-batch*: it takes the requests waiting when it is free, prefills them together (prompts left-padded to the
longest, a padding + causal mask), then decodes the batch one token per call until its longest answer is done.
Requests that arrive meanwhile wait for the next batch. Arrivals are a Poisson process of --rate requests per
second (fixed seed); prompts are 8-32 tokens, answers 2-6 tokens.

Every request's arrival, first-token, per-token and finish times (seconds since the load started), token counts
and batch size go to a request log in msdiag's JSONL format, which ``msdiag analyze`` reads::

    python examples/serve_load.py --rate 1 --requests 12 --max-batch 4 --out requests.jsonl
    msdiag analyze requests.jsonl
    msdiag capture --steps 40 -- python examples/serve_load.py --rate 8 --out requests.jsonl   # + a capture
    msdiag analyze <capture folder> --requests requests.jsonl

No profiler code: under ``msdiag capture`` each call of the decoder (a prefill or a decode step) is a step. A
warm-up request runs before the load starts and is not logged.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate_kv  # noqa: E402  (the decoder with a KV cache: examples/generate_kv.py)
import mindspore  # noqa: E402
from mindspore import Tensor  # noqa: E402

PROMPT_TOKENS = (8, 32)
OUTPUT_TOKENS = (2, 6)
PROMPT_BUCKET = 8  # prompts are padded to a multiple of this: fewer distinct shapes for PyNative to prepare
NEG = -1e9


@dataclass
class Request:
    rid: int
    arrival: float  # seconds after the load started
    prompt: np.ndarray
    want: int  # tokens to generate
    times: list[float] = field(default_factory=list)
    batch: int = 0


def make_requests(n: int, rate: float, seed: int) -> list[Request]:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / rate, size=n)
    arrivals = np.cumsum(gaps) - gaps[0]  # the first request arrives when the load starts
    out = []
    for i, a in enumerate(arrivals):
        p = int(rng.integers(PROMPT_TOKENS[0], PROMPT_TOKENS[1] + 1))
        w = int(rng.integers(OUTPUT_TOKENS[0], OUTPUT_TOKENS[1] + 1))
        out.append(Request(i, float(a), rng.integers(1, generate_kv.VOCAB, size=p).astype(np.int32), w))
    return out


def prefill_inputs(batch: list[Request]) -> tuple[Tensor, Tensor, np.ndarray]:
    """Left-padded tokens [B, S], the causal + padding mask [B, 1, S, S], and each row's padding."""
    longest = max(len(r.prompt) for r in batch)
    s = -(-longest // PROMPT_BUCKET) * PROMPT_BUCKET
    tokens = np.zeros((len(batch), s), dtype=np.int32)
    pad = np.zeros(len(batch), dtype=np.int64)
    mask = np.triu(np.full((s, s), NEG, dtype=np.float32), k=1)[None, None].repeat(len(batch), axis=0)
    for b, r in enumerate(batch):
        pad[b] = s - len(r.prompt)
        tokens[b, pad[b]:] = r.prompt
        mask[b, 0, :, : pad[b]] = NEG  # padding is never attended to
    return Tensor(tokens), Tensor(mask), pad


def decode_mask(pad: np.ndarray, length: int) -> Tensor:
    m = np.zeros((len(pad), 1, 1, length), dtype=np.float32)
    for b, p in enumerate(pad):
        m[b, 0, 0, :p] = NEG
    return Tensor(m)


def run_batch(model: generate_kv.TinyDecoder, batch: list[Request], now) -> None:  # type: ignore[no-untyped-def]
    """Prefill the batch, then decode until its longest request is done; record each token's time."""
    tokens, mask, pad = prefill_inputs(batch)
    logits, ks, vs = model(tokens, mask)
    nxt = logits.argmax(-1).reshape(len(batch), 1)
    nxt.asnumpy()  # the token exists on the host: its time is now
    t = now()
    for r in batch:
        r.times.append(t)
        r.batch = len(batch)
    length = tokens.shape[1]
    for _ in range(max(r.want for r in batch) - 1):
        length += 1
        logits, ks, vs = model(nxt, decode_mask(pad, length), ks, vs)
        nxt = logits.argmax(-1).reshape(len(batch), 1)
        nxt.asnumpy()
        t = now()
        for r in batch:
            if len(r.times) < r.want:
                r.times.append(t)


def serve(requests: list[Request], max_batch: int, model: generate_kv.TinyDecoder) -> None:
    """One server loop: static batches of up to max_batch of the requests waiting when it is free."""
    t0 = time.perf_counter()

    def now() -> float:
        return time.perf_counter() - t0

    pending = sorted(requests, key=lambda r: r.arrival)
    while pending:
        t = now()
        if pending[0].arrival > t:
            time.sleep(pending[0].arrival - t)
            continue
        batch = [r for r in pending if r.arrival <= t][:max_batch]
        for r in batch:
            pending.remove(r)
        run_batch(model, batch, now)


def write_log(path: str, requests: list[Request], args: argparse.Namespace) -> None:
    header = {
        "format": "msdiag-requests",
        "version": 1,
        "generator": "examples/serve_load.py",
        "model": "generate_kv.TinyDecoder (2 layers, hidden 128, vocabulary 1000), MindSpore PyNative CPU",
        "policy": f"static batches of up to {args.max_batch}",
        "rate_rps": args.rate,
        "requests": args.requests,
        "seed": args.seed,
        "clock": "seconds since the load started (time.perf_counter)",
    }
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for r in sorted(requests, key=lambda r: r.rid):
            f.write(
                json.dumps(
                    {
                        "request_id": f"r{r.rid}",
                        "arrival_s": round(r.arrival, 6),
                        "first_token_s": round(r.times[0], 6),
                        "finish_s": round(r.times[-1], 6),
                        "prompt_tokens": int(len(r.prompt)),
                        "output_tokens": len(r.times),
                        "token_times_s": [round(x, 6) for x in r.times],
                        "batch_size": r.batch,
                    }
                )
                + "\n"
            )


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1.0, help="requests per second, Poisson arrivals (default 1)")
    parser.add_argument("--requests", type=int, default=12, help="requests in the run (default 12)")
    parser.add_argument("--max-batch", type=int, default=4, help="largest static batch (default 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of arrivals, prompts and answer lengths (default 0)")
    parser.add_argument("--out", default="serve_load_requests.jsonl", help="request log to write (JSONL)")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.requests < 1 or args.max_batch < 1:
        parser.error("--rate must be > 0, --requests and --max-batch >= 1")

    mindspore.set_device("CPU")
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
    mindspore.set_seed(0)
    model = generate_kv.TinyDecoder()
    model.set_train(False)
    requests = make_requests(args.requests, args.rate, args.seed)
    warm = make_requests(1, 1.0, args.seed + 1)[0]
    run_batch(model, [warm], time.perf_counter)  # PyNative prepares its ops on the first call: not logged
    started = time.perf_counter()
    serve(requests, args.max_batch, model)
    took = time.perf_counter() - started
    write_log(args.out, requests, args)
    ttft = sorted((r.times[0] - r.arrival) * 1000 for r in requests)
    p99 = float(np.percentile(ttft, 99))
    print(
        f"served {len(requests)} requests in {took:.1f} s at {args.rate:g} req/s (static batches <= {args.max_batch}): "
        f"TTFT median {float(np.median(ttft)):.0f} ms, p99 {p99:.0f} ms -> {args.out}",
        flush=True,
    )


if __name__ == "__main__":
    main()
