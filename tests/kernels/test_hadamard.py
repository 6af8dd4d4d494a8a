"""hadamard.py: the random-sign Hadamard rotation is orthogonal and leaves QKᵀ unchanged."""

import pytest
import torch

from fa3fp8.hadamard import rotate, sign_hadamard, signs, sylvester


@pytest.mark.parametrize("d", [64, 128, 256])
def test_rotation_is_orthogonal_with_unit_entries(d):
    r = sign_hadamard(d)
    assert set(r.unique().tolist()) == {-1.0, 1.0}
    torch.testing.assert_close(r @ r.T / d, torch.eye(d, dtype=torch.float64))


@pytest.mark.parametrize("d", [64, 128, 256])
def test_rotation_in_halves_equals_the_whole_product(d):
    """The quantizer's form: with a, b the halves of x · diag(signs) and H Sylvester's matrix of size d / 2,
    x · R · sqrt(d) = [a · H + b · H, a · H - b · H]."""
    torch.testing.assert_close(sign_hadamard(d), signs(d)[:, None] * sylvester(d))
    x = torch.randn(8, d, dtype=torch.float64)
    a, b = (x * signs(d)).split(d // 2, dim=1)
    a_h, b_h = a @ sylvester(d // 2), b @ sylvester(d // 2)
    torch.testing.assert_close(torch.cat([a_h + b_h, a_h - b_h], 1), rotate(x) * d**0.5)


@pytest.mark.parametrize("d", [64, 128])
def test_scores_are_unchanged_and_outliers_spread(d):
    q, k = torch.randn(16, d, dtype=torch.float64), torch.randn(16, d, dtype=torch.float64)
    q[3, 5] = 100.0
    torch.testing.assert_close(rotate(q) @ rotate(k).T, q @ k.T)
    assert rotate(q).abs().max() < 0.5 * q.abs().max()


def test_non_power_of_two_is_rejected():
    with pytest.raises(ValueError, match="power of two"):
        sign_hadamard(96)
