"""OBS's defining pieces: the closed-form update, the blocked solve, conv Hessians, exact counts."""

import copy

import pytest
import torch
from torch import nn

from baselines import obs as obs_module
from baselines.obs import ALLOCATIONS, LayerOBS, OBSOptions, hull_allocation, obs
from fcpts.core.masks import prunable_layers
from fcpts.methods import METHODS, get_method
from tests.conftest import DEVICES


def linear_with_hessian(w, H):
    layer = nn.Linear(len(w[0]), len(w), bias=False)
    layer.weight.data = torch.tensor(w, dtype=torch.float32)
    o = LayerOBS(layer)
    o.H = torch.tensor(H, dtype=torch.float64)[None]
    return o


def test_one_weight_closed_form_by_hand():
    """H = [[2,1,0],[1,2,1],[0,1,2]], H^-1 = [[3,-2,1],[-2,4,-2],[1,-2,3]] / 4, w = [1, 2, 3].
    Costs w_q^2 / [H^-1]_qq: 4/3, 4, 12, so w_0 goes; delta = -(1 / (3/4)) * [3, -2, 1] / 4 = [-1, 2/3, -1/3]
    gives [0, 8/3, 8/3] and an output error of exactly w_0^2 / [H^-1]_00 = 4/3."""
    o = linear_with_hessian([[1.0, 2.0, 3.0]], [[2, 1, 0], [1, 2, 1], [0, 1, 2]])
    w, _ = o.prune(1, percdamp=0.0)
    assert w[0].tolist() == pytest.approx([0.0, 8 / 3, 8 / 3], abs=1e-12)
    assert o.error(w) == pytest.approx(4 / 3, abs=1e-12)


def test_closed_form_for_any_weight_when_it_comes_first():
    """The column-wise update of the first column is the full OBS update; permuting the columns so that q
    comes first gives it for any q."""
    g = torch.Generator().manual_seed(1)
    X = torch.randn(4, 30, generator=g, dtype=torch.float64)
    H, w = X @ X.T / 30, torch.randn(1, 4, generator=g, dtype=torch.float64)
    Hinv = torch.linalg.inv(H)
    for q in range(4):
        perm = [q] + [i for i in range(4) if i != q]
        o = linear_with_hessian(w[:, perm].tolist(), H[perm][:, perm].tolist())
        keep = torch.ones(1, 4, dtype=torch.bool)
        keep[0, 0] = False
        got, _ = o.prune(0, percdamp=0.0, keep=keep)
        expected = w[0] - w[0, q] / Hinv[q, q] * Hinv[:, q]
        assert torch.allclose(got[0], expected[perm].to(got.dtype), atol=1e-6)


def reference_prune(W, H, keep, percdamp):
    """Unblocked column-by-column OBS: prune column i's masked weights and update all later columns with
    the inverse of the damped Hessian of the columns not yet visited."""
    W = W.clone().double()
    H = H + percdamp * torch.diagonal(H).mean() * torch.eye(len(H), dtype=H.dtype)
    for i in range(W.shape[1]):
        Hinv = torch.linalg.inv(H[i:, i:])
        q = torch.where(keep[:, i], W[:, i], torch.zeros_like(W[:, i]))
        W[:, i:] -= ((W[:, i] - q) / Hinv[0, 0])[:, None] * Hinv[0][None, :]
        W[:, i] = q
    return W


@pytest.mark.parametrize("block", [1, 3, 7, 64])
def test_blocked_lazy_updates_equal_unblocked_reference(block):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(10, 40, generator=g, dtype=torch.float64)
    X[3] = X[2] + 0.01 * X[3]  # correlated inputs make the updates matter
    H = X @ X.T / 40
    W = torch.randn(6, 10, generator=g, dtype=torch.float64)
    keep = torch.rand(6, 10, generator=g) > 0.5
    o = linear_with_hessian(W.tolist(), H.tolist())
    got, _ = o.prune(0, block_size=block, percdamp=0.01, keep=keep)
    assert torch.allclose(got, reference_prune(W, H, keep, 0.01), atol=1e-9)
    assert torch.equal(got == 0, ~keep)


def test_adaptive_mask_has_exact_count_and_beats_magnitude():
    """OBS updates on the magnitude mask lower the error of plain magnitude pruning; OBS's own mask lowers it more."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(12, 200, generator=g)
    X = torch.cat([base, base[:4] + 0.1 * torch.randn(4, 200, generator=g)])  # 16 correlated inputs
    layer = nn.Linear(16, 8, bias=False)
    layer.weight.data = torch.randn(8, 16, generator=g)
    o = LayerOBS(layer)
    o.add_batch(X.T)
    keep = layer.weight.abs() > layer.weight.abs().flatten().kthvalue(64).values
    magnitude = o.error(layer.weight * keep)
    on_mask, _ = o.prune(0, block_size=4, keep=keep)
    own, _ = o.prune(64, block_size=4)
    assert int((own == 0).sum()) == 64
    assert o.error(own) < o.error(on_mask) < magnitude


@pytest.mark.parametrize(
    "conv",
    [
        dict(in_channels=4, out_channels=6, kernel_size=3, padding=1),
        dict(in_channels=4, out_channels=6, kernel_size=3, stride=2, dilation=2, padding=2, groups=2),
        dict(in_channels=4, out_channels=8, kernel_size=3, groups=4, padding="same", padding_mode="reflect"),
        dict(in_channels=4, out_channels=4, kernel_size=(1, 3), padding=(0, 1), groups=4),
        dict(in_channels=4, out_channels=6, kernel_size=1),
        dict(in_channels=4, out_channels=6, kernel_size=1, groups=2, padding="same"),
    ],
)
@pytest.mark.parametrize("chunk_bytes", [1, obs_module.GRAM_CHUNK_BYTES])
def test_conv_hessian_gives_the_true_output_error(conv, chunk_bytes, monkeypatch):
    """tr(dW H dW^T) equals the mean over images of the summed squared output change: patches, groups,
    stride, dilation and padding modes line up with the weight layout, whether a batch's Hessian is summed
    image by image or at once."""
    monkeypatch.setattr(obs_module, "GRAM_CHUNK_BYTES", chunk_bytes)
    torch.manual_seed(0)
    layer = nn.Conv2d(bias=False, **conv).double().requires_grad_(False)
    x = torch.randn(5, 4, 9, 9, dtype=torch.float64)
    o = LayerOBS(layer)
    o.add_batch(x[:2])
    o.add_batch(x[2:])  # running average over images
    w_new = layer.weight.detach() * (torch.rand(layer.weight.shape) > 0.5)
    pruned = copy.deepcopy(layer)
    pruned.weight.data = w_new
    expected = ((pruned(x) - layer(x)) ** 2).sum() / len(x)
    assert o.error(w_new) == pytest.approx(expected.item(), rel=1e-5)
    with_dense = LayerOBS(layer)
    with_dense.add_batch(x, 2 * x)  # C = sum of dense columns times pruned ones: here twice H
    torch.testing.assert_close(with_dense.C, 2 * with_dense.H)


def test_hessians_accumulated_batch_by_batch_equal_the_whole_sets():
    """One running matrix per layer (and one for the dense cross term): its size does not depend on the number
    of images, and batches added one by one give the statistics of all images at once."""
    torch.manual_seed(0)
    layer = nn.Conv2d(4, 6, 3, padding=1, bias=False).double().requires_grad_(False)
    x, x_dense = torch.randn(7, 4, 6, 6, dtype=torch.float64), torch.randn(7, 4, 6, 6, dtype=torch.float64)
    whole, running = LayerOBS(layer), LayerOBS(layer)
    whole.add_batch(x, x_dense)
    for a, b in zip(x.split(3), x_dense.split(3)):
        running.add_batch(a, b)
    assert running.H.shape == running.C.shape == (1, 36, 36) and running.n_images == 7
    close = dict(rtol=1e-5, atol=1e-6 * float(whole.H.abs().max()))  # products in float32, sums in float64
    torch.testing.assert_close(running.H, whole.H, **close)
    torch.testing.assert_close(running.C, whole.C, **close)
    patches = torch.nn.functional.unfold(x, 3, padding=1).permute(1, 0, 2).reshape(36, -1)
    torch.testing.assert_close(whole.H[0], patches @ patches.T / 7, **close)


@pytest.mark.parametrize(
    "make_layer",
    [lambda: nn.Conv2d(8, 12, 3, padding=1), lambda: nn.Conv2d(8, 8, 3, groups=4), lambda: nn.Linear(40, 6)],
    ids=["conv", "grouped", "linear"],
)
def test_error_curve_of_all_levels_at_once_equals_pruning_each_level(make_layer):
    """One factorisation and one batched sweep for every level give bit for bit the errors of pruning each
    level alone (so the "error" allocation, and the masks, are those of a level-by-level sweep). The layers are
    made after the seed: made at collection, their weights hung on what other test modules drew before."""
    torch.manual_seed(0)
    layer = make_layer()
    o = LayerOBS(layer.requires_grad_(False))
    x = torch.randn(9, *((8, 7, 7) if isinstance(layer, nn.Conv2d) else (40,)))
    x[:, 1] = 0  # a dead input
    o.add_batch(x)
    counts = [round(s * layer.weight.numel()) for s in (0.3, 0.6, 0.85, 0.9, 0.99)]
    for block in (5, 128):
        curve = o.error_curve(counts, block, 0.01)
        assert curve == [o.prune(c, block, 0.01)[1]["rel_error"] for c in counts]
        assert curve == sorted(curve)


def test_dead_inputs_are_pruned_first_and_cost_nothing():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(6, 50, generator=g)
    X[1] = 0
    layer = nn.Linear(6, 3, bias=False)
    o = LayerOBS(layer)
    o.add_batch(X.T)
    w, info = o.prune(3, percdamp=0.0)
    assert info["dead_inputs"] == 1 and torch.isfinite(w).all()
    assert torch.all(w[:, 1] == 0) and o.error(w) == pytest.approx(0.0, abs=1e-10)


def test_hull_allocation_by_hand():
    """a: 0 -> 10 zeros costs 1, 10 -> 20 costs 9 more; b: 0 -> 10 costs 3 (its point at 5 lies above the hull).
    15 zeros: a's first 10 (0.1/zero), then 5 of b's (0.3/zero) before a's second segment (0.9/zero)."""
    curves = {"a": [(0, 0.0), (10, 1.0), (20, 10.0)], "b": [(0, 0.0), (5, 2.0), (10, 3.0)]}
    assert hull_allocation(curves, 15) == {"a": 10, "b": 5}
    assert hull_allocation(curves, 25) == {"a": 15, "b": 10}
    with pytest.raises(ValueError):
        hull_allocation(curves, 31)


def small_net(zeros=True):
    torch.manual_seed(0)
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1, groups=2, bias=False),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 5),
    )
    if zeros:  # dense weights that are already zero count as zeros
        with torch.no_grad():
            net[0].weight[:, 0] = 0  # 72 of 216
            net[6].weight[:2] = 0
    return net.eval()


@pytest.mark.parametrize("dense_targets", [False, True])
@pytest.mark.parametrize("allocation", ALLOCATIONS)
def test_exact_global_count_at_several_targets(allocation, dense_targets):
    x = torch.randn(24, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    for target in (0.16, 0.3, 0.6, 0.9):  # 144 of 936 weights (15.4%) are zero to begin with
        net = small_net()
        n = sum(m.weight.numel() for m in prunable_layers(net).values())
        net, report = obs(
            net,
            x,
            target,
            OBSOptions(allocation=allocation, dense_targets=dense_targets, progress=False, batch_size=10),
        )
        zeros = sum(int((m.weight == 0).sum()) for m in prunable_layers(net).values())
        assert zeros == round(target * n), (allocation, target)
        assert report.achieved_sparsity == zeros / n and not net.training


@pytest.mark.parametrize("device", DEVICES)
def test_deterministic_exact_and_global_rng_untouched(device):
    x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(0)).to(device)
    runs = []
    for _ in range(2):
        net = small_net().to(device)
        torch.manual_seed(123)
        net, _ = obs(net, x, 0.7, OBSOptions(progress=False, batch_size=6))
        runs.append((net.state_dict(), torch.rand(1)))
    assert all(torch.equal(v, runs[1][0][k]) for k, v in runs[0][0].items())
    assert {v.device.type for v in runs[0][0].values()} == {device}
    layers = prunable_layers(net).values()
    assert sum(int((m.weight == 0).sum()) for m in layers) == round(0.7 * sum(m.weight.numel() for m in layers))
    torch.manual_seed(123)
    assert torch.equal(runs[0][1], torch.rand(1))


@pytest.mark.parametrize("dense_targets", [False, True])
def test_sequential_hessians_come_from_the_pruned_model(dense_targets):
    """The second layer is pruned on the inputs that the already-pruned first layer produces, towards the
    dense model's outputs with `dense_targets`."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    dense = copy.deepcopy(net)
    x = torch.randn(40, 6)
    net, _ = obs(net, x, 0.5, OBSOptions(allocation="uniform", progress=False, dense_targets=dense_targets))
    o = LayerOBS(dense[2])
    o.add_batch(net[1](net[0](x)), dense[1](dense[0](x)) if dense_targets else None)
    expected, _ = o.prune(12)
    assert torch.allclose(net[2].weight, expected.float(), atol=1e-6)
    assert not torch.allclose(net[0].weight, dense[0].weight)


def test_registered_with_its_options():
    assert "obs" in METHODS
    method = get_method("obs")
    method.check_overrides({"allocation": "erk", "percdamp": 0.1, "bn_recalibration": False})
    with pytest.raises(ValueError, match="no option"):
        method.check_overrides({"iterations": 5})
    with pytest.raises(ValueError, match="allocation"):
        obs(small_net(), torch.randn(4, 3, 8, 8), 0.5, OBSOptions(allocation="lamp"))


def test_dense_targets_reach_for_the_dense_outputs():
    """With the dense model's inputs beside, an unpruned layer becomes the least-squares map from the
    pruned model's inputs to the dense outputs W X_dense."""
    g = torch.Generator().manual_seed(0)
    x_dense = torch.randn(30, 5, generator=g)
    x_pruned = x_dense + 0.3 * torch.randn(30, 5, generator=g)
    layer = nn.Linear(5, 2, bias=False)
    o = LayerOBS(layer)
    o.add_batch(x_pruned[:10], x_dense[:10])
    o.add_batch(x_pruned[10:], x_dense[10:])
    w, _ = o.prune(0, percdamp=0.0)
    expected = torch.linalg.lstsq(x_pruned.double(), x_dense.double() @ layer.weight.detach().double().T).solution.T
    assert torch.allclose(w, expected, atol=1e-8)


def test_prune_leaves_the_layer_alone_also_in_float64():
    layer = nn.Linear(6, 4, bias=False).double()
    before = layer.weight.detach().clone()
    o = LayerOBS(layer)
    o.add_batch(torch.randn(20, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    w, _ = o.prune(12, block_size=2)
    assert torch.equal(layer.weight, before) and int((w == 0).sum()) == 12


def test_bn_recalibration_option():
    x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    before = small_net()[1].running_mean.clone()
    off, _ = obs(small_net(), x, 0.7, OBSOptions(progress=False))
    on, report = obs(small_net(), x, 0.7, OBSOptions(progress=False, bn_recalibration=True))
    assert torch.equal(off[1].running_mean, before) and not torch.allclose(on[1].running_mean, before)
    assert not on.training and report.options["bn_recalibration"] is True


def test_through_the_registry_with_budget_options():
    x = torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    method = get_method("obs")
    options = method.make_options(
        {"seed": 3, "progress": False, "iterations": 9}, {"allocation": "erk", "block_size": 4}
    )
    model, report = method(small_net(), x, 0.75, options)
    n = sum(m.weight.numel() for m in prunable_layers(model).values())
    assert round(report.achieved_sparsity * n) == round(0.75 * n)
    assert report.method == "obs" and report.seed == 3 and report.options["block_size"] == 4
