"""Tests for transformer_lib.optim (label smoothing, the schedules), transformer_lib.training (the loop,
evaluation) and transformer_lib.checkpoints."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.checkpoints import load_checkpoint, save_checkpoint
from transformer_lib.data import make_batch
from transformer_lib.optim import (
    LabelSmoothingLoss,
    cosine_lr,
    make_adamw,
    make_optimizer,
    smoothed_targets,
    warmup_lr,
)
from transformer_lib.tasks import make_splits, make_task
from transformer_lib.text import TextBatch, TextDataset, split_text
from transformer_lib.training import History, exact_match, language_model_loss, train, train_step

# --------------------------------------------------------------------------- label smoothing


def test_smoothed_targets():
    q = smoothed_targets(torch.tensor([3, 0, 4]), vocab_size=6, smoothing=0.2, pad_id=0)
    assert q.shape == (3, 6)
    torch.testing.assert_close(q[0], torch.tensor([0.0, 0.05, 0.05, 0.8, 0.05, 0.05]))
    assert torch.all(q[1] == 0)  # a pad target counts for nothing
    torch.testing.assert_close(q[[0, 2]].sum(-1), torch.ones(2))
    assert torch.all(q[:, 0] == 0)  # the pad never gets probability
    with pytest.raises(ValueError, match=r"smoothing.*\[0, 1\).*1.0"):
        smoothed_targets(torch.tensor([3]), 6, smoothing=1.0)


def test_label_smoothing_loss_is_cross_entropy_with_smoothed_targets():
    torch.manual_seed(0)
    log_probs = torch.log_softmax(torch.randn(2, 5, 9), dim=-1)
    target = torch.tensor([[3, 4, 5, 2, 0], [6, 7, 2, 0, 0]])
    loss = LabelSmoothingLoss(smoothing=0.1, pad_id=0)(log_probs, target)
    q = smoothed_targets(target.flatten(), 9, 0.1, 0)
    expected = -(q * log_probs.reshape(-1, 9)).sum() / (target != 0).sum()
    torch.testing.assert_close(loss, expected)
    plain = LabelSmoothingLoss(smoothing=0.0)(log_probs, target)
    torch.testing.assert_close(plain, F.nll_loss(log_probs.reshape(-1, 9), target.flatten(), ignore_index=0))
    with pytest.raises(ValueError, match=r"log_probs.*target.shape.*\(2, 5, 9\)"):
        LabelSmoothingLoss()(log_probs, target[:, :3])


def test_label_smoothing_loss_against_pytorchs_cross_entropy():
    # PyTorch spreads eps over all V classes (the true one and the pad included), ours over the
    # V - 2 others and never the pad; pad targets are skipped by both
    torch.manual_seed(1)
    V, pad = 9, 0
    logits = torch.randn(4, 6, V, dtype=torch.float64)
    target = torch.randint(1, V, (4, 6))
    target[0, 3:] = pad
    target[2, 5] = pad
    log_probs = torch.log_softmax(logits, dim=-1)
    flat_logits, flat_target = logits.reshape(-1, V), target.reshape(-1)

    # 1) eps = 0: both are the mean negative log-likelihood of the non-pad targets
    torch.testing.assert_close(LabelSmoothingLoss(0.0, pad)(log_probs, target),
                               F.cross_entropy(flat_logits, flat_target, ignore_index=pad))  # fmt: skip

    # 2) a model that gives the pad no probability: ours(eps) is PyTorch's over the V - 1
    #    non-pad classes with eps' = eps (V - 1) / (V - 2)
    eps = 0.1
    no_pad = logits.clone()
    no_pad[..., pad] = -1e4  # exp(-1e4) is 0 in float64
    ours = LabelSmoothingLoss(eps, pad)(torch.log_softmax(no_pad, dim=-1), target)
    theirs = F.cross_entropy(no_pad[..., 1:].reshape(-1, V - 1), flat_target - 1,  # classes 1..V-1 -> 0..V-2
                             ignore_index=pad - 1, label_smoothing=eps * (V - 1) / (V - 2))  # fmt: skip
    torch.testing.assert_close(ours, theirs)

    # 3) otherwise they differ: PyTorch's eps / V on the pad class and 1 - eps + eps / V on the true one
    same_eps = F.cross_entropy(flat_logits, flat_target, ignore_index=pad, label_smoothing=eps)
    assert abs(LabelSmoothingLoss(eps, pad)(log_probs, target).item() - same_eps.item()) > 1e-4
    real = flat_target != pad
    q = torch.full((int(real.sum()), V), eps / V, dtype=torch.float64)
    q[torch.arange(len(q)), flat_target[real]] += 1 - eps
    by_hand = -(q * log_probs.reshape(-1, V)[real]).sum(-1).mean()
    torch.testing.assert_close(same_eps, by_hand)


# --------------------------------------------------------------------------- schedule and optimizer


def test_warmup_schedule_rises_linearly_then_decays_as_inverse_sqrt():
    d_model, warmup = 512, 4000
    steps = np.arange(1, 20001)
    lr = warmup_lr(steps, d_model, warmup)
    assert int(np.argmax(lr)) + 1 == warmup  # the peak is at the end of the warm-up
    np.testing.assert_allclose(lr[:warmup], steps[:warmup] * d_model**-0.5 * warmup**-1.5)
    np.testing.assert_allclose(lr[warmup:], steps[warmup:] ** -0.5 * d_model**-0.5)
    assert warmup_lr(4000, 512) == pytest.approx(512**-0.5 * 4000**-0.5)  # ~7.0e-4
    assert warmup_lr(0, 512) == warmup_lr(1, 512)
    assert warmup_lr(10, 64, 100, factor=2.0) == pytest.approx(2 * warmup_lr(10, 64, 100))
    with pytest.raises(ValueError, match="warmup_steps.*positive.*0"):
        warmup_lr(1, 512, 0)


def test_make_optimizer_is_the_papers_adam_with_the_schedule():
    model = tl.Transformer(tl.TransformerConfig.preset("tiny"))
    optimizer, scheduler = make_optimizer(model, d_model=32, warmup_steps=10, factor=2.0)
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
    lrs = []
    for _ in range(20):
        lrs.append(group["lr"])
        optimizer.step()
        scheduler.step()
    np.testing.assert_allclose(lrs, warmup_lr(np.arange(1, 21), 32, 10, 2.0))


def test_make_optimizer_fused_update_equals_plain_adam():
    # the fused kernel is a faster route to the same update, not a different optimizer;
    # both get the same gradients (from a real step, then random ones), since Adam with
    # eps 1e-9 amplifies rounding noise in near-zero gradients into visible differences
    torch.manual_seed(0)
    model = tl.Transformer(tl.TransformerConfig.preset("tiny", dropout=0.0))
    twin, initial = copy.deepcopy(model), copy.deepcopy(model)
    optimizer, scheduler = make_optimizer(model, d_model=32, warmup_steps=10)
    assert optimizer.param_groups[0]["fused"] is True
    plain = torch.optim.Adam(twin.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=False, foreach=False)
    plain_scheduler = torch.optim.lr_scheduler.LambdaLR(plain, lambda i: warmup_lr(i + 1, 32, 10))
    model(torch.randint(4, 12, (8, 7)), torch.randint(4, 12, (8, 6))).sum().backward()
    for step in range(5):
        if step:
            for p in model.parameters():
                p.grad = torch.randn_like(p)
        for p, q in zip(model.parameters(), twin.parameters()):
            q.grad = p.grad.clone()
        for opt, sch in ((optimizer, scheduler), (plain, plain_scheduler)):
            opt.step()
            sch.step()
    moved = [(p - q).abs().max().item() for p, q in zip(model.parameters(), twin.parameters())]
    assert max(moved) < 1e-6
    travelled = [(p - q).abs().max().item() for p, q in zip(model.parameters(), initial.parameters())]
    assert min(travelled) > 1e-3  # every weight did move


def nanogpt_lr(it, learning_rate=1e-3, warmup_iters=100, lr_decay_iters=2000, min_lr=1e-4):
    """nanoGPT's get_lr (train.py), copied as it is written there."""
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + np.cos(np.pi * decay_ratio))
    return min_lr + coeff * (learning_rate - min_lr)


def test_cosine_schedule_is_nanogpts():
    steps = np.arange(0, 2500)
    np.testing.assert_allclose(cosine_lr(steps), [nanogpt_lr(i) for i in steps], rtol=1e-12)
    assert cosine_lr(0) == pytest.approx(1e-3 / 101) and cosine_lr(100) == pytest.approx(1e-3)
    assert cosine_lr(1050) == pytest.approx(5.5e-4) and cosine_lr(2000) == cosine_lr(9999) == pytest.approx(1e-4)
    np.testing.assert_allclose(cosine_lr(steps, 3e-4, 10, 500, 0.0), [nanogpt_lr(i, 3e-4, 10, 500, 0.0) for i in steps])
    with pytest.raises(ValueError, match="decay_steps.*greater than warmup_steps=100.*50"):
        cosine_lr(0, decay_steps=50)
    with pytest.raises(ValueError, match=r"min_lr.*\[0, lr=0.001\].*0.01"):
        cosine_lr(0, min_lr=1e-2)
    with pytest.raises(ValueError, match="warmup_steps.*non-negative.*-1"):
        cosine_lr(0, warmup_steps=-1)


def test_make_adamw_decays_the_matrices_only():
    torch.manual_seed(0)
    model = tl.build_model(tl.TransformerConfig.preset("gpt-tiny", tgt_vocab_size=11, src_vocab_size=11))
    optimizer, scheduler = make_adamw(model, lr=1e-2, warmup_steps=0, decay_steps=10, weight_decay=0.5)
    decayed, kept = optimizer.param_groups
    assert isinstance(optimizer, torch.optim.AdamW) and decayed["betas"] == (0.9, 0.99)
    assert (decayed["weight_decay"], kept["weight_decay"]) == (0.5, 0.0)
    assert all(p.dim() == 2 for p in decayed["params"]) and all(p.dim() == 1 for p in kept["params"])
    embedding = model.decoder.embedding.token_embedding.weight
    assert any(p is embedding for p in decayed["params"])  # the tied embedding, once
    assert len(decayed["params"]) + len(kept["params"]) == len(list(model.parameters()))
    # with zero gradients AdamW's update is the decay alone: w <- w * (1 - lr * weight_decay)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    scheduler.step()
    for name, p in model.named_parameters():
        factor = 1 - 1e-2 * 0.5 if p.dim() >= 2 else 1.0
        torch.testing.assert_close(p.detach(), before[name] * factor, msg=name)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(cosine_lr(1, 1e-2, 0, 10))


# --------------------------------------------------------------------------- evaluation


class Oracle:
    """A stub that decodes the right answer of the copy task, except for source ``wrong``."""

    def __init__(self, wrong=None):
        self.wrong = wrong

    def encode(self, src, src_mask):
        return src.float()[..., None]  # (batch, src_len, 1)

    def decode(self, tgt, memory, src_mask, tgt_mask):
        src = memory[..., 0].long()  # (batch, src_len)
        t = tgt.shape[1] - 1  # predicting output position t
        answer = src[:, t] if t < src.shape[1] else torch.zeros_like(src[:, 0])
        answer = torch.where(answer == 0, torch.full_like(answer, 2), answer)  # <eos> after the source
        if self.wrong is not None and src.shape[1] >= len(self.wrong):
            wrong = torch.zeros(src.shape[1], dtype=torch.long)
            wrong[: len(self.wrong)] = self.wrong
            answer = torch.where((src == wrong).all(1), torch.full_like(answer, 2), answer)  # ends at once
        log_probs = torch.full((tgt.shape[0], tgt.shape[1], 20), -1e9)
        log_probs[torch.arange(tgt.shape[0]), -1, answer] = 0.0
        return log_probs


def test_exact_match_counts_whole_sequences():
    data = make_task("copy", 40, seed=0, max_len=6, num_symbols=8)
    assert exact_match(Oracle(), data) == 1.0
    wrong = torch.tensor(data.src_vocab.encode(data.pairs[5][0]))
    assert exact_match(Oracle(wrong=wrong), data, batch_size=7) == pytest.approx(39 / 40)
    with pytest.raises(TypeError, match="data.*Seq2SeqDataset.*list"):
        exact_match(Oracle(), [([3], [3])])


def test_exact_match_without_the_cache_decodes_the_whole_prefix(monkeypatch):
    data = make_task("copy", 30, seed=0, max_len=5, num_symbols=6)
    torch.manual_seed(0)
    model = tl.Transformer(tl.TransformerConfig.preset("tiny", src_vocab_size=9, tgt_vocab_size=9))
    lengths = []  # the decoder input's length at every call
    decode = model.decode

    def recording_decode(tgt, *args, **kwargs):
        lengths.append(tgt.shape[1])
        return decode(tgt, *args, **kwargs)

    monkeypatch.setattr(model, "decode", recording_decode)
    without = exact_match(model, data, use_cache=False)
    assert lengths == list(range(1, len(lengths) + 1))  # <bos>, then one token more each step
    lengths.clear()
    assert exact_match(model, data) == without
    assert max(lengths) == 1  # with the cache each step feeds only the newest token


# --------------------------------------------------------------------------- the training loop


def test_training_on_the_copy_task_reaches_exact_copies(one_thread, tmp_path):
    train_data, test_data = make_splits("copy", 1500, 100, seed=0, min_len=1, max_len=6, num_symbols=5)
    config = tl.TransformerConfig.preset("tiny", src_vocab_size=len(train_data.src_vocab),
                                         tgt_vocab_size=len(train_data.tgt_vocab))  # fmt: skip
    torch.manual_seed(0)
    model = tl.Transformer(config)
    history = train(model, train_data, steps=1500, batch_size=32, warmup_steps=100, lr_factor=2.0,
                    eval_data=test_data, eval_every=100, target_accuracy=1.0, progress=False)  # fmt: skip
    assert isinstance(history, History)
    assert history.final_accuracy == 1.0, history.eval_accuracy  # every held-out copy exact
    assert history.steps < 1500 and history.steps == len(history.losses) == len(history.lrs)
    assert np.mean(history.losses[-20:]) < 0.5 * np.mean(history.losses[:20])
    assert history.tokens > 0 and history.tokens_per_second > 0
    assert history.total_seconds >= history.train_seconds > 0 and history.train_cpu_seconds > 0
    src = make_batch([(train_data.src_vocab.encode(["1", "4", "0", "3"]), [])]).src
    out = tl.decoding.greedy_decode(model, src, max_len=8)
    assert train_data.tgt_vocab.decode(out[0]) == ["1", "4", "0", "3"]

    # checkpoint: a model rebuilt from the file decodes the same and the history comes back
    path = tmp_path / "copy.pt"
    save_checkpoint(path, model, history=history)
    restored, restored_history = load_checkpoint(path)
    assert isinstance(restored, tl.Transformer) and not restored.training
    assert restored_history == history
    batch = next(test_data.batches(50, shuffle=False))
    torch.testing.assert_close(restored(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask),
                               model.eval()(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask))  # fmt: skip


def test_train_seconds_are_the_wall_time_of_the_steps_alone(one_thread, sleepy_encoder):
    """``train_seconds`` is wall time (the steps' sleep counts; not in ``train_cpu_seconds``), evaluation left out."""
    data = make_task("copy", 64, seed=1, max_len=4, num_symbols=4)
    model = tl.Transformer(tl.TransformerConfig.preset("tiny", src_vocab_size=7, tgt_vocab_size=7))
    waits = sleepy_encoder(model, in_steps=0.02, in_evaluation=0.5)  # seconds slept, keyed by training mode
    history = train(model, data, steps=10, batch_size=16, eval_data=data, eval_every=5, eval_batches=2,
                    progress=False)  # fmt: skip
    stepping, evaluating = sum(waits[True]), sum(waits[False])
    assert len(waits[True]) == 10 and len(waits[False]) >= 2  # a pass a step; at least one an evaluation
    assert history.train_seconds >= stepping  # the waits in the steps are counted
    assert history.train_seconds - history.train_cpu_seconds >= 0.9 * stepping  # as wall time only
    assert history.train_seconds < stepping + min(waits[False])  # the evaluations' waits are not
    assert history.total_seconds - history.train_seconds >= evaluating  # but the total has them


def test_checkpoint_restores_the_optimizer_to_continue_training(one_thread, tmp_path):
    data = make_task("copy", 64, seed=1, max_len=4, num_symbols=4)
    config = tl.TransformerConfig.preset("tiny", src_vocab_size=7, tgt_vocab_size=7)
    model = tl.Transformer(config)
    optimizer, scheduler = make_optimizer(model, 32, warmup_steps=10)
    history = train(model, data, steps=5, batch_size=16, optimizer=optimizer, scheduler=scheduler, progress=False)
    save_checkpoint(tmp_path / "c.pt", model, optimizer, scheduler, history)
    model2 = tl.Transformer(config)
    optimizer2, scheduler2 = make_optimizer(model2, 32, warmup_steps=10)
    model2, history2 = load_checkpoint(tmp_path / "c.pt", model2, optimizer2, scheduler2)
    assert optimizer2.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    assert scheduler2.last_epoch == 5
    history2 = train(model2, data, steps=3, batch_size=16, optimizer=optimizer2, scheduler=scheduler2,
                     history=history2, progress=False)  # fmt: skip
    assert history2.steps == 8 and len(history2.losses) == 8


def test_train_stops_at_the_time_limit_and_checks_its_arguments(one_thread):
    data = make_task("copy", 64, seed=1, max_len=4, num_symbols=4)
    model = tl.Transformer(tl.TransformerConfig.preset("tiny", src_vocab_size=7, tgt_vocab_size=7))
    history = train(model, data, steps=10_000, batch_size=16, time_limit=0.2, progress=False)
    assert history.steps < 10_000 and history.train_seconds >= 0.2
    assert train(model, data, epochs=2, batch_size=16, progress=False).steps == 8  # 4 batches per epoch
    # any accuracy reaches 0: it stops at the third check in a row, one step each
    quick = train(model, data, steps=50, batch_size=16, eval_data=data, eval_every=1, target_accuracy=0.0,
                  target_checks=3, progress=False)  # fmt: skip
    assert quick.steps == 3 and quick.eval_steps == [1, 2, 3]
    with pytest.raises(ValueError, match="target_checks.*positive.*0"):
        train(model, data, steps=1, eval_data=data, target_accuracy=0.5, target_checks=0)
    with pytest.raises(ValueError, match="steps or epochs.*neither"):
        train(model, data)
    with pytest.raises(ValueError, match="target_accuracy.*eval_data"):
        train(model, data, steps=1, target_accuracy=0.9)
    with pytest.raises(TypeError, match="data.*Seq2SeqDataset.*TextDataset.*list"):
        train(model, [], steps=1)
    with pytest.raises(ValueError, match="d_model.*config.d_model"):
        train(torch.nn.Linear(2, 2), data, steps=1)


def _bars_of_an_early_stop(monkeypatch, bar_class, more_steps: int = 0) -> list:
    """Train until a target accuracy of 0 holds at 2 checks (2 of 50 steps), then ``more_steps``
    steps without a target; return every progress bar ``train`` made, as ``bar_class``."""
    bars = []

    class Recorder(bar_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bars.append(self)

    monkeypatch.setattr(tl.training, "tqdm", Recorder)
    data = make_task("copy", 64, seed=1, max_len=4, num_symbols=4)
    model = tl.Transformer(tl.TransformerConfig.preset("tiny", src_vocab_size=7, tgt_vocab_size=7))
    train(model, data, steps=50, batch_size=16, eval_data=data, eval_every=1, target_accuracy=0.0,
          target_checks=2, progress=True)  # fmt: skip
    if more_steps:
        train(model, data, steps=more_steps, batch_size=16, progress=True)
    return bars


def test_a_run_that_stops_early_ends_its_progress_bar_at_the_steps_taken(one_thread, monkeypatch):
    # a notebook bar closed short of its total turns red, which reads as a crash
    early, full = _bars_of_an_early_stop(monkeypatch, tl.training.tqdm, more_steps=5)
    assert (early.n, early.total) == (2, 2) and "stopped early" in early.desc
    assert (full.n, full.total) == (5, 5) and "stopped early" not in full.desc


def test_a_notebook_bar_that_stops_early_is_full_and_green(one_thread, monkeypatch):
    from tqdm.notebook import tqdm as notebook_tqdm

    (bar,) = _bars_of_an_early_stop(monkeypatch, notebook_tqdm)
    widget = bar.container.children[1]  # the IntProgress the notebook shows
    assert (widget.value, widget.max) == (2, 2) and widget.bar_style == "success"


# --------------------------------------------------------------------------- a language model


def cycle_text(n: int = 4000, period: int = 7, seed: int = 0) -> torch.Tensor:
    """A text whose next token follows from the current one: a random cycle through 7 ids, repeated."""
    cycle = torch.randperm(period, generator=torch.Generator().manual_seed(seed))
    return cycle.repeat(n // period + 1)[:n]  # (n,)


def tiny_gpt(vocab_size: int = 7, seed: int = 0) -> torch.nn.Module:
    config = tl.TransformerConfig.preset("gpt-tiny", src_vocab_size=vocab_size, tgt_vocab_size=vocab_size,
                                         d_model=32, num_layers=1, d_ff=64, max_len=16)  # fmt: skip
    torch.manual_seed(seed)
    return tl.build_model(config)


def test_language_model_loss_is_the_mean_next_token_loss():
    torch.manual_seed(0)
    model = tiny_gpt()
    data = TextDataset(cycle_text(1000), block_size=16)
    model.train()
    by_hand = []
    with torch.no_grad():
        for batch in data.loader(12, 30, seed=5):
            log_probs = model.eval()(batch.tgt_in)
            by_hand.append(F.nll_loss(log_probs.flatten(0, 1), batch.tgt_out.flatten()).item())
    model.train()
    # the same windows, fed 256 at a time: the same mean; the model's mode is restored
    assert language_model_loss(model, data, 30, 12, seed=5) == pytest.approx(np.mean(by_hand), rel=1e-6)
    assert model.training
    whole = torch.cat([b.tgt_out for b in data.sequential_loader(1000)])
    assert whole.numel() == (1000 - 16) // 16 * 16 + 16  # the 62 windows starting at 0, 16, ..., 976
    assert language_model_loss(model, data, None) > 0
    with pytest.raises(TypeError, match="data.*TextDataset.*list"):
        language_model_loss(model, [1, 2, 3])


def test_train_step_on_a_text_batch():
    torch.manual_seed(0)
    model = tiny_gpt()
    batch = next(iter(TextDataset(cycle_text(500), 16).loader(8, 1, seed=0)))
    assert isinstance(batch, TextBatch)
    optimizer, scheduler = make_adamw(model, warmup_steps=0, decay_steps=10)
    expected = F.nll_loss(model(batch.tgt_in).flatten(0, 1), batch.tgt_out.flatten()).item()
    loss = train_step(model, batch, torch.nn.CrossEntropyLoss(), optimizer, scheduler)
    assert loss == pytest.approx(expected, rel=1e-5)  # the loss before the update
    assert F.nll_loss(model(batch.tgt_in).flatten(0, 1), batch.tgt_out.flatten()).item() < expected


def test_train_learns_a_language_model_and_records_the_curve(one_thread, tmp_path):
    train_data, val_data = split_text(cycle_text(4000), block_size=16)
    model = tiny_gpt()
    history = train(model, train_data, steps=120, batch_size=16, warmup_steps=10, lr=1e-2, min_lr=1e-3,
                    eval_data=val_data, eval_every=40, eval_batches=5, progress=False)  # fmt: skip
    assert history.steps == len(history.losses) == 120 and history.tokens == 120 * 16 * 16
    assert history.eval_steps == [0, 40, 80, 120]  # before training, then every 40 steps
    assert len(history.eval_loss) == len(history.eval_train_loss) == len(history.eval_seconds) == 4
    assert history.eval_seconds[0] == 0 and history.eval_seconds == sorted(history.eval_seconds)
    assert history.eval_loss[0] > 1.5 and history.final_loss < 0.1  # ln 7 = 1.95 -> the cycle is learned
    assert history.final_accuracy is None and not history.eval_accuracy
    np.testing.assert_allclose(history.lrs, cosine_lr(np.arange(1, 121), 1e-2, 10, 120, 1e-3))
    assert history.final_loss == pytest.approx(language_model_loss(model, val_data, 5, 16))

    # seeded: the same run again gives the same losses; another seed draws other windows
    again = train(tiny_gpt(), train_data, steps=20, batch_size=16, warmup_steps=10, progress=False)
    twice = train(tiny_gpt(), train_data, steps=20, batch_size=16, warmup_steps=10, progress=False)
    other = train(tiny_gpt(), train_data, steps=20, batch_size=16, warmup_steps=10, progress=False, seed=1)
    assert again.losses == twice.losses and again.losses != other.losses

    # a float16 checkpoint: half the bytes, and the model it loads is the float16-rounded one
    save_checkpoint(tmp_path / "lm32.pt", model, history=history)
    save_checkpoint(tmp_path / "lm16.pt", model, history=history, dtype=torch.float16)
    assert (tmp_path / "lm16.pt").stat().st_size < 0.7 * (tmp_path / "lm32.pt").stat().st_size
    restored, restored_history = load_checkpoint(tmp_path / "lm16.pt")
    assert isinstance(restored, tl.DecoderOnlyModel) and restored_history == history
    for (name, p), q in zip(model.named_parameters(), restored.parameters()):
        assert q.dtype == torch.float32
        torch.testing.assert_close(q, p.detach().half().float(), rtol=0, atol=0, msg=name)
    with pytest.raises(TypeError, match="dtype.*floating.*int64"):
        save_checkpoint(tmp_path / "x.pt", model, dtype=torch.int64)


def test_language_model_training_stops_early_and_checks_its_arguments(one_thread):
    train_data, val_data = split_text(cycle_text(4000), block_size=16)
    model = tiny_gpt()
    history = train(model, train_data, steps=400, batch_size=16, warmup_steps=10, lr=1e-2, eval_data=val_data,
                    eval_every=10, eval_batches=2, target_loss=0.5, target_checks=2, progress=False)  # fmt: skip
    assert history.steps < 400 and max(history.eval_loss[-2:]) <= 0.5 < min(history.eval_loss[:-2])
    with pytest.raises(ValueError, match="steps.*TextDataset.*epochs=2"):
        train(model, train_data, epochs=2)
    with pytest.raises(TypeError, match="eval_data.*TextDataset.*Seq2SeqDataset"):
        train(model, train_data, steps=1, eval_data=make_task("copy", 10))
    with pytest.raises(ValueError, match="target_loss.*eval_data.*TextDataset"):
        train(model, train_data, steps=1, target_loss=1.0)
    with pytest.raises(ValueError, match="target_accuracy.*Seq2SeqDataset"):
        train(model, train_data, steps=1, eval_data=val_data, target_accuracy=0.9)
    with pytest.raises(ValueError, match="decay_steps.*warmup_steps=100.*5"):
        train(model, train_data, steps=5)


def test_seq2seq_batches_come_from_the_seeded_dataloader(one_thread, monkeypatch):
    data = make_task("reverse", 96, seed=1, max_len=6, num_symbols=6)
    config = tl.TransformerConfig.preset("tiny", src_vocab_size=9, tgt_vocab_size=9)
    seen = []
    loader = type(data).loader

    def recording_loader(self, *args, **kwargs):
        made = loader(self, *args, **kwargs)
        seen.append(made)
        return made

    monkeypatch.setattr(type(data), "loader", recording_loader)
    runs = []
    for seed in (0, 0, 1):
        torch.manual_seed(0)
        runs.append(train(tl.Transformer(config), data, epochs=2, batch_size=32, seed=seed, progress=False).losses)
    assert len(seen) == 6 and all(isinstance(s, torch.utils.data.DataLoader) for s in seen)  # one per epoch
    assert [s.batch_sampler.seed for s in seen[:2]] == [0, 4]  # seed + steps so far + epoch
    assert runs[0] == runs[1] and runs[0] != runs[2]
