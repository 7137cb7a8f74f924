"""Tests for transformer_lib._checks: the one check per idea behind every error message."""

import numpy as np
import pytest
import torch

from transformer_lib import _checks


def test_positive_and_non_negative_numbers():
    assert _checks.positive_int(np.int32(3), "n") == 3 and type(_checks.positive_int(np.int32(3), "n")) is int
    with pytest.raises(ValueError, match=r"heads .*positive integer.*-1"):
        _checks.positive_int(-1, "heads")
    with pytest.raises(TypeError, match=r"heads .*positive integer.*NoneType None"):
        _checks.positive_int(None, "heads")
    assert _checks.non_negative_int(0, "k") == 0
    with pytest.raises(ValueError, match=r"k .*non-negative.*-2"):
        _checks.non_negative_int(-2, "k")
    with pytest.raises(TypeError, match=r"k .*non-negative.*bool"):
        _checks.non_negative_int(True, "k")
    assert _checks.positive_float(1, "eps") == 1.0 and type(_checks.positive_float(1, "eps")) is float
    with pytest.raises(ValueError, match=r"eps .*positive.*0"):
        _checks.positive_float(0.0, "eps")
    with pytest.raises(TypeError, match=r"eps .*positive.*str"):
        _checks.positive_float("1e-5", "eps")


def test_probability_and_flag():
    assert _checks.probability(0, "p") == 0.0 and _checks.probability(np.float32(0.5), "p") == 0.5
    with pytest.raises(ValueError, match=r"p .*\[0, 1\).*1"):
        _checks.probability(1, "p")
    with pytest.raises(TypeError, match=r"p .*float.*bool True"):
        _checks.probability(True, "p")
    assert _checks.flag(False, "scale") is False
    with pytest.raises(TypeError, match=r"scale .*True or False.*int 1"):
        _checks.flag(1, "scale")


def test_one_of_names_every_option():
    assert _checks.one_of("b", "kind", ("a", "b")) == "b"
    assert _checks.one_of("x", "kind", {"x": 1, "y": 2}) == "x"  # a dict offers its keys
    with pytest.raises(ValueError, match=r"kind .*one of \['a', 'b'\].*'c'"):
        _checks.one_of("c", "kind", ("a", "b"))
    with pytest.raises(TypeError, match=r"kind .*one of \['a', 'b'\].*int 3"):
        _checks.one_of(3, "kind", ("a", "b"))


def test_token_ids_and_token_id():
    ids = torch.tensor([[0, 4], [2, 1]])
    assert _checks.token_ids(ids, "src", 5) is ids and _checks.token_ids(ids, "src") is ids
    with pytest.raises(ValueError, match=r"src .*\[0, 4\).*0 to 4"):
        _checks.token_ids(ids, "src", 4)
    with pytest.raises(ValueError, match=r"src .*\[0, 5\).*-1 to 4"):
        _checks.token_ids(torch.tensor([[-1, 4]]), "src", 5)
    with pytest.raises(TypeError, match=r"src .*integer token ids.*float32"):
        _checks.token_ids(ids.float(), "src")
    with pytest.raises(TypeError, match=r"src .*integer token ids.*bool"):
        _checks.token_ids(ids > 0, "src")
    with pytest.raises(TypeError, match=r"src .*torch.Tensor.*list"):
        _checks.token_ids([[1, 2]], "src")
    with pytest.raises(ValueError, match=r"src .*\(batch, seq\).*\(2,\)"):
        _checks.token_ids(ids[0], "src")
    assert _checks.token_ids(torch.zeros(2, 0, dtype=torch.long), "src", 5).shape == (2, 0)
    assert _checks.token_id(np.int64(2), "eos_id") == 2
    for bad in (-1, 1.0, True, "<eos>"):
        with pytest.raises(TypeError, match=r"eos_id .*non-negative int"):
            _checks.token_id(bad, "eos_id")


def test_bool_mask_uses_broadcasting_without_growing_the_target():
    mask = torch.ones(1, 5, dtype=torch.bool)
    assert _checks.bool_mask(mask, "m", (3, 5), "(q, k)") is mask
    for shape in ((5,), (1, 5), (3, 5), (), (1, 1, 3, 5)[-2:]):
        _checks.bool_mask(torch.ones(shape, dtype=torch.bool), "m", (2, 3, 5), "(b, q, k)")
    for shape in ((4,), (2, 5), (2, 2, 3, 5), (3, 1, 5)):  # mismatched, or would grow the target
        with pytest.raises(ValueError, match=r"m .*\(.*\).*broadcast.*\(b, q, k\) = \(2, 3, 5\)"):
            _checks.bool_mask(torch.ones(shape, dtype=torch.bool), "m", (2, 3, 5), "(b, q, k)")
    assert _checks.bool_mask(np.ones(5, dtype=bool), "m", (3, 5), "(q, k)") is not None
    with pytest.raises(TypeError, match=r"m .*boolean torch.Tensor.*ndarray"):
        _checks.bool_mask(np.ones(5, dtype=bool), "m", (3, 5), "(q, k)", tensor=True)
    with pytest.raises(TypeError, match=r"m .*boolean array or tensor.*list"):
        _checks.bool_mask([True], "m", (3, 5), "(q, k)")
    with pytest.raises(TypeError, match=r"m .*boolean.*float32"):
        _checks.bool_mask(torch.ones(5), "m", (3, 5), "(q, k)")


def test_tensors_and_shapes():
    x = torch.zeros(2, 3)
    assert _checks.float_tensor(x, "x") is x
    assert _checks.shape_of(np.zeros((2, 3))) == (2, 3) and _checks.shape_of(x) == (2, 3)
    _checks.ndim_exactly(x, 2, "x", "(a, b)")
    _checks.ndim_at_least(x, 1, "x", "(..., b)")
    with pytest.raises(ValueError, match=r"x .*\(a, b, c\).*\(2, 3\)"):
        _checks.ndim_exactly(x, 3, "x", "(a, b, c)")
    with pytest.raises(ValueError, match=r"sizes of a and b.*2 and 3"):
        _checks.same_size(2, 3, "sizes of a and b")
    h = torch.zeros(2, 4, 8)
    assert _checks.hidden(h, "memory", 8) is h
    with pytest.raises(ValueError, match=r"memory .*\(batch, src_len, d_model=6\).*\(2, 4, 8\)"):
        _checks.hidden(h, "memory", 6, "(batch, src_len, d_model={})")
    with pytest.raises(TypeError, match=r"memory .*floating-point.*int64"):
        _checks.hidden(h.long(), "memory", 8)


def test_as_float_array():
    assert _checks.as_float_array([1, 2], "a").dtype == np.float64
    assert _checks.as_float_array(np.ones(2, dtype=np.float32), "a").dtype == np.float32
    assert _checks.as_float_array(np.array([True, False]), "a").dtype == np.float64
    with pytest.raises(TypeError, match=r"a .*numbers.*object"):
        _checks.as_float_array(np.array([{}, 1], dtype=object), "a")
    with pytest.raises(TypeError, match=r"a .*numpy array.*torch.Tensor"):
        _checks.as_float_array(torch.zeros(2), "a")
