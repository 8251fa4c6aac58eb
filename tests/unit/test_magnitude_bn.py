"""The magnitude + BatchNorm re-estimation baseline: global magnitude masks, BN statistics of the sparse network
over the calibration images, nothing else changed."""

import torch
from torch import nn

from fcpts.methods import get_method
from tests.unit.tiny import tiny_net


def images():
    return torch.randn(24, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def test_masks_of_global_magnitude_and_bn_statistics_of_the_sparse_net_over_the_calibration_set():
    x = images()
    magnitude, _ = get_method("global-magnitude")(tiny_net(), x, 0.6, progress=False)
    model, report = get_method("magnitude-bn")(tiny_net(), x, 0.6, progress=False, bn_batch_size=24)
    for (name, p), q in zip(model.named_parameters(), magnitude.parameters()):
        assert torch.equal(p, q), name  # the same weights, biases and BN affine: no reconstruction
    with torch.no_grad():  # BN statistics of the sparse network over the 24 images (one batch)
        h = model[0](x)
    bn = model[1]
    assert torch.allclose(bn.running_mean, h.mean((0, 2, 3)), atol=1e-6)
    assert torch.allclose(bn.running_var, h.var((0, 2, 3), unbiased=True), atol=1e-5)
    assert not torch.allclose(bn.running_mean, magnitude[1].running_mean)
    assert report.method == "magnitude-bn"
    assert round(report.achieved_sparsity * 824) == round(0.6 * 824) and report.calibration_indices == list(range(24))
    assert not model.training and bn.momentum == nn.BatchNorm2d(8).momentum


def test_registered_as_an_extra_beyond_the_paper():
    method = get_method("magnitude-bn")
    assert not method.in_paper and not method.trains and method.label == "Magnitude + BN re-estimation"
