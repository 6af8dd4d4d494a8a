"""hadamard.py: the random-sign Hadamard rotation is orthogonal and leaves QKᵀ unchanged."""

import pytest
import torch

from fa3fp8.hadamard import rotate, sign_hadamard


@pytest.mark.parametrize("d", [64, 128, 256])
def test_rotation_is_orthogonal_with_unit_entries(d):
    r = sign_hadamard(d)
    assert set(r.unique().tolist()) == {-1.0, 1.0}
    torch.testing.assert_close(r @ r.T / d, torch.eye(d, dtype=torch.float64))


@pytest.mark.parametrize("d", [64, 128])
def test_scores_are_unchanged_and_outliers_spread(d):
    q, k = torch.randn(16, d, dtype=torch.float64), torch.randn(16, d, dtype=torch.float64)
    q[3, 5] = 100.0
    torch.testing.assert_close(rotate(q) @ rotate(k).T, q @ k.T)
    assert rotate(q).abs().max() < 0.5 * q.abs().max()


def test_non_power_of_two_is_rejected():
    with pytest.raises(ValueError, match="power of two"):
        sign_hadamard(96)
