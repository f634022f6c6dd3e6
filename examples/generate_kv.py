"""An inference (generation) loop with a KV cache: a tiny decoder, prefill then token-by-token decode.

A 2-layer pre-norm decoder (hidden 128, 4 heads, vocabulary 1000) in PyNative mode. Each request
runs one prefill call over its prompt (``--prompt-len`` tokens, causal mask), which returns the
keys and values of every layer, then ``--new-tokens`` decode calls of one token each that attend to
the cached keys and values and append their own (greedy: the next token is the argmax). Token
counts are fixed, so every run does the same work: ``--requests`` x (1 + ``--new-tokens``) calls.

    python examples/generate_kv.py                    # 2 requests x (1 prefill + 15 decode) = 32 calls

There is no dataset: ``msdiag capture`` counts each call of the outermost Cell (the decoder) as one
step. No profiler code: ``msdiag capture -- python examples/generate_kv.py`` profiles it from outside.
"""

from __future__ import annotations

import argparse
import time
from typing import Optional

import mindspore
import numpy as np
from mindspore import Tensor, nn, ops

VOCAB = 1000
HIDDEN = 128
HEADS = 4
LAYERS = 2
MLP = 512


class DecoderLayer(nn.Cell):
    """Pre-norm attention with a KV cache, then a GELU MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.ln1 = nn.LayerNorm((HIDDEN,))
        self.qkv = nn.Dense(HIDDEN, 3 * HIDDEN)
        self.proj = nn.Dense(HIDDEN, HIDDEN)
        self.ln2 = nn.LayerNorm((HIDDEN,))
        self.fc1 = nn.Dense(HIDDEN, MLP)
        self.gelu = nn.GELU(approximate=False)
        self.fc2 = nn.Dense(MLP, HIDDEN)
        self.softmax = nn.Softmax(axis=-1)
        self.scale = 1.0 / float(np.sqrt(self.head_dim))

    def construct(self, x, mask, k_cache, v_cache):
        b, s, h = x.shape
        qkv = self.qkv(self.ln1(x).reshape(b * s, h)).reshape(b, s, 3, HEADS, self.head_dim)
        qkv = qkv.transpose(2, 0, 3, 1, 4)  # 3, b, heads, s, head_dim
        q, k, v = qkv[0], qkv[1], qkv[2]
        if k_cache is not None:  # decode: attend to the cache and append to it
            k = ops.cat((k_cache, k), axis=2)
            v = ops.cat((v_cache, v), axis=2)
        scores = ops.matmul(q, k.swapaxes(-1, -2)) * self.scale
        if mask is not None:
            scores = scores + mask
        out = ops.matmul(self.softmax(scores), v).transpose(0, 2, 1, 3).reshape(b * s, h)
        x = x + self.proj(out).reshape(b, s, h)
        y = self.fc2(self.gelu(self.fc1(self.ln2(x).reshape(b * s, h))))
        return x + y.reshape(b, s, h), k, v


class TinyDecoder(nn.Cell):
    """Embedding, decoder layers, final norm and the vocabulary head (logits of the last position)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.CellList([DecoderLayer() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm((HIDDEN,))
        self.head = nn.Dense(HIDDEN, VOCAB)

    def construct(self, tokens, mask=None, k_caches=None, v_caches=None):
        x = self.embed(tokens)
        ks, vs = [], []
        for i, layer in enumerate(self.layers):
            kc = None if k_caches is None else k_caches[i]
            vc = None if v_caches is None else v_caches[i]
            x, k, v = layer(x, mask, kc, vc)
            ks.append(k)
            vs.append(v)
        return self.head(self.ln_f(x[:, -1])), tuple(ks), tuple(vs)


def causal_mask(n: int) -> Tensor:
    m = np.triu(np.full((n, n), -1e9, dtype=np.float32), k=1)
    return Tensor(m[None, None])


def generate(requests: int, prompt_len: int, new_tokens: int) -> list[float]:
    mindspore.set_device("CPU")
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
    mindspore.set_seed(0)
    model = TinyDecoder()
    model.set_train(False)
    rng = np.random.default_rng(0)
    mask = causal_mask(prompt_len)
    times = []
    call = 0
    total = requests * (1 + new_tokens)
    for r in range(1, requests + 1):
        prompt = Tensor(rng.integers(0, VOCAB, (1, prompt_len)).astype(np.int32))
        out = []
        t0 = time.perf_counter()
        logits, ks, vs = model(prompt, mask)  # prefill
        nxt = logits.argmax(-1).reshape(1, 1)
        out.append(int(nxt.asnumpy()[0, 0]))
        for kind in ["prefill"] + ["decode"] * new_tokens:
            if kind == "decode":
                t0 = time.perf_counter()
                logits, ks, vs = model(nxt, None, ks, vs)  # one token, attends to the cache
                nxt = logits.argmax(-1).reshape(1, 1)
                out.append(int(nxt.asnumpy()[0, 0]))
            call += 1
            dt = (time.perf_counter() - t0) * 1000.0
            times.append(dt)
            print(f"step {call}/{total}  request {r} {kind}  cache {ks[0].shape[2]}  time {dt:.1f} ms", flush=True)
        print(f"request {r}: {len(out)} tokens generated: {out[:8]} ...", flush=True)
    return times


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2, help="requests (default 2)")
    parser.add_argument("--prompt-len", type=int, default=64, help="prompt tokens per request (default 64)")
    parser.add_argument("--new-tokens", type=int, default=15, help="tokens generated per request (default 15)")
    args = parser.parse_args(argv)
    times = generate(args.requests, args.prompt_len, args.new_tokens)
    rest = sorted(times[1:] or times)
    print(f"done: {len(times)} calls, median {rest[len(rest) // 2]:.1f} ms/call after the first", flush=True)


if __name__ == "__main__":
    main()
