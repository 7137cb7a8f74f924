"""GPT-2: our DecoderOnlyModel against Hugging Face's GPT2LMHeadModel, same configuration, same weights.

The model: 4 layers, 4 heads, d_model 128, d_ff 512, a 1,024-token vocabulary, learned
positions up to 256, GPT-2's layout (pre-norm, GELU tanh, tied output layer), dropout 0.
It is built as a ``GPT2LMHeadModel`` (``transformers``' default ``sdpa`` attention) and
converted with :func:`transformer_lib.from_gpt2`, so both hold the same weights, and both
are checked to give the same log-probabilities before anything is timed. Dropout is 0
because GPT-2 drops out at three places and ours at one more (the feed-forward hidden
layer): with dropout the two would not do the same work.

Two jobs, each ``ours / transformers`` (``ratio``; below 1, ours is faster):

- ``train step``: forward, the next-token cross-entropy, backward (gradients set to
  ``None`` first), a batch of 12 sequences of 64, 128 and 256 tokens. Goal: ratio at most
  1.10. Ours returns log-probabilities (``nll_loss``), GPT-2 logits (``cross_entropy``,
  which takes the same log-softmax). GPT-2's own activation, ``gelu_new``, is written in
  Python (``0.5 x (1 + tanh(...))``, five element-wise passes and their backward), where
  ours calls ``F.gelu(approximate="tanh")``, one fused kernel, the same function to
  float32 rounding. So the row ``ratio, fused GELU`` also times GPT-2 configured with
  ``gelu_pytorch_tanh`` (the same weights): the comparison of the rest of the code.
- ``generate``: greedy continuation of a 16-token prompt by 32 and 96 tokens, batch 12.
  ``transformers``' ``generate`` keeps a key-value cache (``use_cache=True``, its default),
  so each step feeds one new token; ours is ``tl.generate`` with the library's defaults.
  Without a cache (the row's name says which), each of our steps runs the whole sequence
  again and the ratio grows with the length. No goal. The continuations are checked equal.

Timing: ``torch.utils.benchmark.Timer(..., num_threads=threads).blocked_autorange``, in
rounds that alternate the implementations (``run.interleaved``), so background load hits
all alike; each figure is the median over every block of every round (``ratio``), and
``ratio_of_minima`` compares the fastest blocks, which background load disturbs least.
``torch.utils.benchmark.Compare`` prints the times side by side.

Run on its own (``python benchmarks/bench_gpt2.py [--rounds N] [--threads T]``) or
through ``benchmarks/run.py``, which calls :func:`run`.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils import benchmark
from transformers import GPT2Config, GPT2LMHeadModel

import transformer_lib as tl

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
from run import argument_parser, format_table, interleaved, print_comparison  # noqa: E402  (benchmarks/run.py, beside this file)

GOAL = 1.10
MODEL = dict(n_layer=4, n_head=4, n_embd=128, n_inner=512, vocab_size=1024, n_positions=256)
BATCH = 12
CONTEXTS = (64, 128, 256)
PROMPT = 16
NEW_TOKENS = (32, 96)
ROUNDS = 2
MIN_RUN_TIME = 1.0  # seconds of repeats per round
# does tl.generate keep a key-value cache? (by default, when it has the option)
OUR_CACHE = "use_cache" in inspect.signature(tl.generate).parameters


def build(model: dict | None = None, seed: int = 0) -> dict[str, torch.nn.Module]:
    """``{"ours", "transformers", "transformers, fused GELU"}``: three models with the same weights."""
    fields = dict(MODEL if model is None else model, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                  bos_token_id=None, eos_token_id=None)  # fmt: skip
    torch.manual_seed(seed)
    theirs = GPT2LMHeadModel(GPT2Config(**fields))  # activation_function "gelu_new", GPT-2's
    fused = GPT2LMHeadModel(GPT2Config(**fields, activation_function="gelu_pytorch_tanh"))
    fused.load_state_dict(theirs.state_dict())
    return {"ours": tl.from_gpt2(theirs), "transformers": theirs, "transformers, fused GELU": fused}


def check_same(models: dict[str, torch.nn.Module], ids: torch.Tensor) -> float:
    """Every model gives our log-probabilities (GPT-2's as ``log_softmax`` of its logits); the max difference."""
    worst = 0.0
    with torch.no_grad():
        ours = models["ours"].eval()(ids)
        for name, model in models.items():
            if name != "ours":
                diff = (ours - torch.log_softmax(model.eval()(ids).logits, dim=-1)).abs().max().item()
                assert diff < 1e-4, f"ours and {name} disagree by {diff}"
                worst = max(worst, diff)
    return worst


def train_step(model: torch.nn.Module, ids: torch.Tensor) -> None:
    """Forward, next-token cross-entropy, backward; ``ids`` is ``(batch, t + 1)``."""
    model.zero_grad(set_to_none=True)
    inputs, targets = ids[:, :-1], ids[:, 1:].flatten()
    if isinstance(model, tl.DecoderOnlyModel):
        loss = F.nll_loss(model(inputs).flatten(0, 1), targets)  # ours: log-probabilities
    else:
        loss = F.cross_entropy(model(inputs).logits.flatten(0, 1), targets)  # GPT-2: logits
    loss.backward()


def generate(model: torch.nn.Module, prompt: torch.Tensor, new: int) -> torch.Tensor:
    """Greedy continuation by ``new`` tokens: ``tl.generate`` for ours, ``generate`` (with its cache) for GPT-2."""
    with torch.no_grad():
        if isinstance(model, tl.DecoderOnlyModel):
            return tl.generate(model, prompt, new, greedy=True)
        return model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=new,
                              min_new_tokens=new, pad_token_id=0, use_cache=True)  # fmt: skip


def _timer(step, label: str, sub_label: str, who: str, threads: int) -> benchmark.Timer:
    return benchmark.Timer("step()", globals={"step": step}, label=label, sub_label=sub_label,
                           description=who, num_threads=threads)  # fmt: skip


def _row(job: str, size: str, m: dict[str, benchmark.Measurement], threads: int, goal: bool) -> dict:
    ours, theirs = m["ours"], m["transformers"]
    ratio = ours.median / theirs.median
    row = {
        "benchmark": f"GPT-2 {job}",
        "size": size,
        "ours_ms": round(ours.median * 1e3, 3),
        "transformers_ms": round(theirs.median * 1e3, 3),
        "ratio": round(ratio, 3),
        "ratio_of_minima": round(min(ours.times) / min(theirs.times), 3),
    }
    if "transformers, fused GELU" in m:
        row["ratio, fused GELU"] = round(ours.median / m["transformers, fused GELU"].median, 3)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    row.update(goal=GOAL if goal else "", met=(ratio <= GOAL) if goal else "", threads=threads,
               load_avg_1min=round(load, 1))  # fmt: skip
    return row


def run(rounds: int = ROUNDS, threads: int = 2, contexts: tuple[int, ...] = CONTEXTS,
        new_tokens: tuple[int, ...] = NEW_TOKENS, model: dict | None = None, batch: int = BATCH,
        prompt_len: int = PROMPT, min_run_time: float = MIN_RUN_TIME, compare: bool = True) -> list[dict]:  # fmt: skip
    """Time the training step at each context and generation of each number of tokens; one row each.

    ``compare`` prints ``torch.utils.benchmark.Compare``'s tables of the medians too.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # the checks and the set-up; each Timer sets it for its statement
    rows, measurements = [], []
    try:
        models = build(model)
        vocab, positions = models["transformers"].config.vocab_size, models["transformers"].config.n_positions
        if max(contexts) > positions or prompt_len + max(new_tokens) > positions:
            raise ValueError(f"contexts {contexts} and prompt_len + new_tokens {prompt_len} + {new_tokens} must "
                             f"fit the model's {positions} positions")
        g = torch.Generator().manual_seed(0)
        check_same(models, torch.randint(0, vocab, (2, max(contexts)), generator=g))
        for module in models.values():
            module.train()
        for context in contexts:
            ids = torch.randint(0, vocab, (batch, context + 1), generator=g)  # inputs and next-token targets
            timers = {who: _timer(lambda m=m, ids=ids: train_step(m, ids), f"GPT-2 train step (threads={threads})",
                                  f"{batch} x {context}", who, threads)
                      for who, m in models.items()}  # fmt: skip
            measured = interleaved(timers, rounds, min_run_time)
            measurements += list(measured.values())
            rows.append(_row("train step", f"{batch} x {context}", measured, threads, goal=True))
        prompt = torch.randint(0, vocab, (batch, prompt_len), generator=g)
        pair = {who: models[who].eval() for who in ("ours", "transformers")}
        for new in new_tokens:
            ours, theirs = (generate(m, prompt, new) for m in pair.values())
            assert torch.equal(ours, theirs), f"the two greedy continuations of {new} tokens differ"
            size = f"{batch} x ({prompt_len} + {new})"
            timers = {who: _timer(lambda m=m, new=new: generate(m, prompt, new), f"GPT-2 generate (threads={threads})",
                                  size, who, threads)
                      for who, m in pair.items()}  # fmt: skip
            measured = interleaved(timers, rounds, min_run_time)
            measurements += list(measured.values())
            job = "generate (ours: KV cache)" if OUR_CACHE else "generate (ours: no KV cache)"
            rows.append(_row(job, size, measured, threads, goal=False))
    finally:
        torch.set_num_threads(previous)
    if compare:
        print_comparison(measurements)
    return rows


if __name__ == "__main__":
    parser = argument_parser(__doc__, ROUNDS, threads=2)
    args = parser.parse_args()
    print(format_table(run(rounds=args.rounds, threads=args.threads)))
