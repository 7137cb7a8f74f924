"""Tests for transformer_lib.training: label smoothing, the schedule, the loop, evaluation, checkpoints."""

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import transformer_lib as tl
from transformer_lib.data import make_batch, make_splits, make_task
from transformer_lib.training import (
    History,
    LabelSmoothingLoss,
    exact_match,
    load_checkpoint,
    make_optimizer,
    save_checkpoint,
    smoothed_targets,
    train,
    warmup_lr,
)


@pytest.fixture
def one_thread():
    """Small models train fastest on one thread (and do not fight other processes for cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# --------------------------------------------------------------------------- label smoothing


def test_smoothed_targets():
    q = smoothed_targets(torch.tensor([3, 0, 4]), vocab_size=6, smoothing=0.2, pad_id=0)
    assert q.shape == (3, 6)
    torch.testing.assert_close(q[0], torch.tensor([0.0, 0.05, 0.05, 0.8, 0.05, 0.05]))
    assert torch.all(q[1] == 0)  # a pad target counts for nothing
    torch.testing.assert_close(q[[0, 2]].sum(-1), torch.ones(2))
    assert torch.all(q[:, 0] == 0)  # the pad never gets probability
    with pytest.raises(ValueError, match="smoothing must be in"):
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
    with pytest.raises(ValueError, match=r"log_probs must have shape target.shape \+ \(V,\)"):
        LabelSmoothingLoss()(log_probs, target[:, :3])


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
    with pytest.raises(ValueError, match="warmup_steps must be a positive integer, got 0"):
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
    with pytest.raises(TypeError, match="data must be a Seq2SeqDataset"):
        exact_match(Oracle(), [([3], [3])])


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
    with pytest.raises(ValueError, match="target_checks must be a positive integer, got 0"):
        train(model, data, steps=1, eval_data=data, target_accuracy=0.5, target_checks=0)
    with pytest.raises(ValueError, match="steps or epochs must be given"):
        train(model, data)
    with pytest.raises(ValueError, match="target_accuracy needs eval_data"):
        train(model, data, steps=1, target_accuracy=0.9)
    with pytest.raises(TypeError, match="data must be a Seq2SeqDataset, got list"):
        train(model, [], steps=1)
    with pytest.raises(ValueError, match="d_model must be given"):
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
