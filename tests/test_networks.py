"""The holdout networks: Shake-Shake's defining property, shapes and parameter counts."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robustlab.errors import InputError
from robustlab.workflows.train import holdout as ho
from robustlab.models import networks as nw


def _branches(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    b1 = torch.randn(n, 3, 4, 4, generator=g, requires_grad=True)
    b2 = torch.randn(n, 3, 4, 4, generator=g, requires_grad=True)
    return b1, b2


def test_shake_at_evaluation_is_exactly_the_mean_of_the_branches():
    b1, b2 = _branches()
    m = nw.ShakeShake(torch.Generator().manual_seed(0)).eval()
    out = m(b1, b2)
    assert torch.equal(out, 0.5 * (b1 + b2))
    # Evaluation draws nothing: the generator's state is untouched.
    g = torch.Generator().manual_seed(0)
    assert torch.equal(m.generator.get_state(), g.get_state())


def test_shake_in_training_mixes_forward_with_alpha_and_backward_with_beta():
    b1, b2 = _branches(n=8)
    m = nw.ShakeShake(torch.Generator().manual_seed(1)).train()
    out = m(b1, b2)
    alpha, beta = m.last
    assert alpha.shape == beta.shape == (8, 1, 1, 1)
    assert torch.allclose(out, alpha * b1 + (1 - alpha) * b2)
    assert not torch.allclose(out, 0.5 * (b1 + b2))
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    out.backward(grad)
    assert torch.allclose(b1.grad, beta * grad) and torch.allclose(b2.grad, (1 - beta) * grad)
    # The backward coefficient is not the forward one: alpha's gradient rule would differ.
    assert not torch.allclose(b1.grad, alpha * grad)
    assert (alpha != beta).all()
    # One draw per sample, each in [0, 1], not one for the whole batch.
    for c in (alpha, beta):
        assert ((c >= 0) & (c <= 1)).all() and len(torch.unique(c)) == 8


def test_shake_coefficients_are_independent_uniforms_from_the_generator():
    x = torch.zeros(20000, 1)
    m = nw.ShakeShake(torch.Generator().manual_seed(7)).train()
    m(x, x)
    alpha, beta = (c.flatten().numpy() for c in m.last)
    for c in (alpha, beta):
        assert abs(c.mean() - 0.5) < 0.01 and abs(c.var() - 1 / 12) < 0.003
        # Uniform: each tenth of [0, 1] holds about a tenth of the draws.
        counts = np.histogram(c, bins=10, range=(0, 1))[0]
        assert (np.abs(counts / len(c) - 0.1) < 0.01).all()
    assert abs(np.corrcoef(alpha, beta)[0, 1]) < 0.03
    # Reproducible from the generator's seed, different under another seed.
    again = nw.ShakeShake(torch.Generator().manual_seed(7)).train()
    again(x, x)
    assert all(torch.equal(a, b) for a, b in zip(m.last, again.last))
    other = nw.ShakeShake(torch.Generator().manual_seed(8)).train()
    other(x, x)
    assert not torch.equal(other.last[0], m.last[0])


def test_even_mode_never_shakes():
    b1, b2 = _branches()
    m = nw.ShakeShake(torch.Generator().manual_seed(0), mode="even").train()
    assert torch.equal(m(b1, b2), 0.5 * (b1 + b2)) and m.last is None
    with pytest.raises(ValueError, match="image or even"):
        nw.ShakeShake(torch.Generator(), mode="batch")


def test_shake_resnext_is_resnext_with_shaken_coefficients():
    torch.manual_seed(0)
    shaken = nw.build("shake-resnext", 5, width=4, seed=3)
    plain = nw.build("resnext", 5, width=4)
    plain.load_state_dict(shaken.state_dict())  # the same parameters, names and shapes
    assert nw.n_parameters(plain) == nw.n_parameters(shaken)
    x = torch.randn(4, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    shaken.eval(), plain.eval()
    assert torch.equal(shaken(x), plain(x))  # evaluation: both average the branches
    shaken.train(), plain.train()
    # Training (batch statistics, no running-stat dependence on the output): plain is
    # deterministic, shaken draws new coefficients every call.
    assert torch.equal(plain(x), plain(x))
    assert not torch.allclose(shaken(x), shaken(x))


def _resnext_params(p, n_classes):
    """ResNeXt parameter count from its hyper-parameters, written out independently."""

    def bn(c):
        return 2 * c

    total = 3 * 9 * p["stem"] + bn(p["stem"])
    c = p["stem"]
    for s, (out, mid) in enumerate(zip(p["stage_channels"], p["branch_channels"])):
        for b in range(p["blocks_per_stage"]):
            branch = c * mid + bn(mid) + mid * (mid // p["groups"]) * 9 + bn(mid)
            branch += mid * out + bn(out)
            total += p["branches"] * branch
            if c != out or (s > 0 and b == 0):
                total += c * out + bn(out)
            c = out
    return total + c * n_classes + n_classes


def _densenet_params(p, n_classes):
    g, c, b = p["growth"], p["stem"], p["bottleneck"]
    total = 3 * 9 * c
    for k, n in enumerate(p["layers_per_block"]):
        for _ in range(n):
            total += 2 * c + c * b * g + 2 * b * g + b * g * g * 9
            c += g
        if k < len(p["layers_per_block"]) - 1:
            out = int(c * p["compression"])
            total += 2 * c + c * out
            c = out
    return total + 2 * c + c * n_classes + n_classes


@pytest.mark.parametrize("width", [4, 8])
def test_network_shapes_and_parameter_counts(width):
    x = torch.zeros(2, 3, 32, 32)
    for arch in nw.OWN_ARCHS:
        net = nw.build(arch, 11, width=width).eval()
        assert net(x).shape == (2, 11), arch
    for arch in ("resnext", "shake-resnext"):
        p = nw.network_params(arch, width)
        assert p["depth"] == 9 * p["blocks_per_stage"] + 2  # 3 stages x 3 convs, stem, fc
        assert nw.n_parameters(nw.build(arch, 11, width)) == _resnext_params(p, 11)
    p = nw.network_params("densenet", width)
    assert p["depth"] == 2 * sum(p["layers_per_block"]) + 4  # 2 convs a layer, stem, 2 trans, fc
    assert nw.n_parameters(nw.build("densenet", 11, width)) == _densenet_params(p, 11)


def test_msdnet_grows_every_scale_and_classifies_the_coarsest():
    p = nw.network_params("msdnet", 8)
    net = nw.build("msdnet", 7, width=8).eval()
    seen = {}
    net.classifier.register_forward_hook(lambda m, i, o: seen.setdefault("in", i[0].shape))
    x = torch.zeros(2, 3, 32, 32)
    xs = [x]
    for stem in net.stems:
        xs.append(stem(xs[-1]))
    xs = xs[1:]
    assert [t.shape[-1] for t in xs] == [32, 16, 8]  # 3 scales
    for layer in net.layers:
        xs = layer(xs)
    want = [c + p["layers"] * g for c, g in zip(p["stem_channels"], p["growth"])]
    assert [t.shape[1] for t in xs] == want  # dense: every layer's features are kept
    net(x)
    assert seen["in"] == (2, want[-1], 8, 8)  # the classifier reads the coarsest scale only


def test_unknown_architecture_is_an_input_error():
    with pytest.raises(InputError, match="small-cnn, resnext, shake-resnext, densenet, msdnet"):
        ho.HoldoutConfig(arch="resnet18")
    with pytest.raises(InputError, match="unknown architecture"):
        nw.build("wide-resnet", 3)


def test_same_seed_gives_the_same_shake_resnext_weights():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (24, 32, 32, 3), dtype=np.uint8)
    labels = np.arange(24) % 3

    def train(seed):
        cfg = ho.HoldoutConfig(arch="shake-resnext", width=4, epochs=1, batch_size=8, seed=seed)
        net, _ = ho.train_network(images, labels, 3, cfg)
        return net.state_dict()

    a, b, c = train(0), train(0), train(1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
