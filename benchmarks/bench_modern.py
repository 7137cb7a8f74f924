"""Today's decoders: tiled attention's memory, our Llama-style model against LlamaForCausalLM, KV-cache sizes.

Three tables of rows:

- ``tiled attention memory``: the most bytes alive at once (``tl.peak_memory``, every
  tensor the call creates, the output included) of the explicit attention
  (``tl.scaled_dot_product_attention``: the ``n x n`` scores and their softmax) and of
  ``tl.tiled_attention`` (blocks of 128 queries and keys, the online softmax), for one head
  of width 64 at ``n`` = 256 to 4,096, causal, float32; the outputs are checked equal. The
  time of one call of each is given too, and it is not the point: a Python loop over blocks
  on a CPU shows FlashAttention's memory, not the speed its GPU kernel gets from keeping
  blocks in on-chip memory.
- ``Llama train step``: our ``DecoderOnlyModel`` built by ``tl.from_llama`` against
  ``transformers``' ``LlamaForCausalLM`` (its default ``sdpa`` attention) with the same
  weights: 4 layers, width 128, 4 query heads and 2 key-value heads, SwiGLU of width 352, a
  1,024-token vocabulary, untied output. Forward, next-token cross-entropy, backward, batches
  of 12 sequences of 64, 128 and 256 tokens; ``ratio`` = ours / transformers, goal at most
  1.10. Timed as ``bench_gpt2`` times GPT-2 (``run.interleaved``: alternating rounds of
  ``blocked_autorange``, medians; ``ratio_of_minima`` compares the fastest blocks).
- ``KV cache per token``: the bytes a key-value cache holds per token,
  ``2 (keys and values) x layers x key-value heads x head width x bytes per number``, for
  multi-head, grouped-query and multi-query attention at Llama 3 8B's published sizes
  (32 layers, 32 query heads of width 128, 8 key-value heads, 16-bit numbers) as
  arithmetic, and measured on a small model (``"llama-tiny"``, float32) as the bytes of
  every cached tensor after generating 64 tokens, divided by 64.

Run on its own (``python benchmarks/bench_modern.py [--rounds N] [--threads T]``) or through
``benchmarks/run.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from torch.utils import benchmark
from transformers import LlamaConfig, LlamaForCausalLM

import transformer_lib as tl

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from bench_gpt2 import train_step  # noqa: E402  (the same step: forward, next-token loss, backward)
from run import format_table, interleaved  # noqa: E402  (benchmarks/run.py, beside this file)

GOAL = 1.10
SIZES = (256, 512, 1024, 2048, 4096)
HEAD_WIDTH = 64
BLOCK = 128
LLAMA = dict(hidden_size=128, intermediate_size=352, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=1024, max_position_embeddings=256, rms_norm_eps=1e-5)  # fmt: skip
BATCH = 12
CONTEXTS = (64, 128, 256)
ROUNDS = 2
MIN_RUN_TIME = 1.0
#: Llama 3 8B (Meta's published configuration): 32 layers, 32 query heads, 8 key-value heads of width 128
LLAMA3_8B = dict(layers=32, query_heads=32, kv_heads=8, head_width=128, bytes_per_number=2)


def _load() -> float:
    return round(os.getloadavg()[0], 1) if hasattr(os, "getloadavg") else float("nan")


def memory_rows(sizes: tuple[int, ...] = SIZES, block: int = BLOCK) -> list[dict]:
    """Peak bytes of the explicit and the tiled attention at each ``n``, outputs checked equal."""
    rows = []
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        q, k, v = (torch.randn(1, 1, n, HEAD_WIDTH, generator=g) for _ in range(3))
        mask = tl.causal_mask(n)
        (naive, _), naive_bytes = tl.peak_memory(tl.scaled_dot_product_attention, q, k, v, mask)
        tiled, tiled_bytes = tl.peak_memory(tl.tiled_attention, q, k, v, causal=True, block_size=block)
        with torch.no_grad():  # the times without the meter, which slows every operation
            start = time.perf_counter()
            tl.scaled_dot_product_attention(q, k, v, mask)
            naive_s = time.perf_counter() - start
            start = time.perf_counter()
            tl.tiled_attention(q, k, v, causal=True, block_size=block)
            tiled_s = time.perf_counter() - start
        diff = (naive - tiled).abs().max().item()
        assert diff < 1e-4, f"tiled and explicit attention disagree by {diff} at n={n}"
        rows.append({"benchmark": "tiled attention memory", "n": n, "naive_MiB": round(naive_bytes / 2**20, 2),
                     "tiled_MiB": round(tiled_bytes / 2**20, 2), "naive / tiled": round(naive_bytes / tiled_bytes, 1),
                     "scores n x n MiB": round(n * n * 4 / 2**20, 2), "max_abs_diff": f"{diff:.1e}",
                     "naive_s": round(naive_s, 3), "tiled_s": round(tiled_s, 3), "block": block})  # fmt: skip
    return rows


def build_llama(seed: int = 0) -> dict[str, torch.nn.Module]:
    """``{"ours", "transformers"}``: a small random Llama and our model converted from it."""
    torch.manual_seed(seed)
    theirs = LlamaForCausalLM(LlamaConfig(**LLAMA, bos_token_id=None, eos_token_id=None, pad_token_id=None))
    return {"ours": tl.from_llama(theirs), "transformers": theirs}


def llama_rows(rounds: int = ROUNDS, threads: int = 2, contexts: tuple[int, ...] = CONTEXTS,
               min_run_time: float = MIN_RUN_TIME) -> tuple[list[dict], list[benchmark.Measurement]]:  # fmt: skip
    models = build_llama()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, LLAMA["vocab_size"], (2, max(contexts)), generator=g)
    with torch.no_grad():
        diff = (models["ours"].eval()(ids) - torch.log_softmax(models["transformers"].eval()(ids).logits, -1)).abs()
    assert diff.max() < 1e-5, f"ours and LlamaForCausalLM disagree by {diff.max()}"
    rows, measurements = [], []
    for context in contexts:
        batch = torch.randint(0, LLAMA["vocab_size"], (BATCH, context + 1), generator=g)
        timers = {who: benchmark.Timer("step()", globals={"step": lambda m=m, b=batch: train_step(m.train(), b)},
                                       label=f"Llama train step (threads={threads})", sub_label=f"{BATCH} x {context}",
                                       description=who, num_threads=threads)
                  for who, m in models.items()}  # fmt: skip
        m = interleaved(timers, rounds, min_run_time)
        measurements += list(m.values())
        ratio = m["ours"].median / m["transformers"].median
        rows.append({"benchmark": "Llama train step", "size": f"{BATCH} x {context}",
                     "ours_ms": round(m["ours"].median * 1e3, 2),
                     "transformers_ms": round(m["transformers"].median * 1e3, 2),
                     "ratio": round(ratio, 3),
                     "ratio_of_minima": round(min(m["ours"].times) / min(m["transformers"].times), 3),
                     "goal": GOAL, "met": ratio <= GOAL, "max_abs_diff": f"{diff.max().item():.1e}",
                     "threads": threads, "load_avg_1min": _load()})  # fmt: skip
    return rows, measurements


def kv_bytes_per_token(layers: int, kv_heads: int, head_width: int, bytes_per_number: int) -> int:
    """Keys and values of every layer for one token: ``2 x layers x kv_heads x head_width x bytes``."""
    return 2 * layers * kv_heads * head_width * bytes_per_number


def kv_rows(new_tokens: int = 64) -> list[dict]:
    rows = []
    c = LLAMA3_8B
    for kind, kv in (("MHA", c["query_heads"]), ("GQA", c["kv_heads"]), ("MQA", 1)):
        per_token = kv_bytes_per_token(c["layers"], kv, c["head_width"], c["bytes_per_number"])
        rows.append({"benchmark": "KV cache per token", "model": "Llama 3 8B sizes (arithmetic)", "attention": kind,
                     "kv_heads": kv, "bytes_per_token": per_token, "KiB_per_token": per_token / 1024,
                     "GiB_for_8192_tokens": round(per_token * 8192 / 2**30, 2)})  # fmt: skip
    base = tl.TransformerConfig.preset("llama-tiny")
    for kind, kv in (("MHA", base.num_heads), ("GQA", 2), ("MQA", 1)):
        torch.manual_seed(0)
        model = tl.build_model(tl.TransformerConfig.preset("llama-tiny", num_kv_heads=kv)).eval()
        cache = model.new_cache()
        ids = torch.randint(0, base.tgt_vocab_size, (1, 1))
        with torch.no_grad():
            for _ in range(new_tokens):
                ids = model(ids, cache=cache)[:, -1].argmax(-1, keepdim=True)
        held = sum(t.untyped_storage().nbytes() for c in cache.self_attn for t in (c.k, c.v))
        expected = kv_bytes_per_token(base.num_layers, kv, base.d_k, 4)
        assert held == expected * new_tokens, f"{kind}: the cache holds {held} bytes, expected {expected * new_tokens}"
        rows.append({"benchmark": "KV cache per token", "model": "llama-tiny (measured, float32)", "attention": kind,
                     "kv_heads": kv, "bytes_per_token": held // new_tokens, "KiB_per_token": held / new_tokens / 1024,
                     "GiB_for_8192_tokens": ""})  # fmt: skip
    return rows


def run(rounds: int = ROUNDS, threads: int = 2, sizes: tuple[int, ...] = SIZES, contexts: tuple[int, ...] = CONTEXTS,
        min_run_time: float = MIN_RUN_TIME, compare: bool = True) -> list[dict]:  # fmt: skip
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        rows = memory_rows(sizes)
        llama, measurements = llama_rows(rounds, threads, contexts, min_run_time)
        rows += llama + kv_rows()
    finally:
        torch.set_num_threads(previous)
    if compare:
        table = benchmark.Compare(measurements)
        table.trim_significant_figures()
        table.print()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="alternating blocked_autorange rounds")
    parser.add_argument("--threads", type=int, default=2, help="threads of every timed statement")
    args = parser.parse_args()
    print(format_table(run(rounds=args.rounds, threads=args.threads)))
