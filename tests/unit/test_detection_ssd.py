"""The two SSD detectors: pytorch-ssd's key layout, priors, box coding, NMS, the loss, the distillation view."""

import math

import pytest
import torch
import torch.nn.functional as F

from fcpts.core.loop import kl_distill
from tasks.voc.ssd import (
    DistillView,
    SSDConfig,
    create_ssd,
    decode_boxes,
    encode_targets,
    load_ssd_weights,
    multibox_loss,
    postprocess,
    reconstruction_blocks,
)

# Shapes of pytorch-ssd's layout (create_mobilenetv1_ssd / create_mobilenetv2_ssd_lite, 21 VOC classes).
MB1_KEYS = {
    "base_net.0.0.weight": (32, 3, 3, 3),
    "base_net.0.1.running_var": (32,),
    "base_net.1.0.weight": (32, 1, 3, 3),
    "base_net.1.3.weight": (64, 32, 1, 1),
    "base_net.1.4.bias": (64,),
    "base_net.11.3.weight": (512, 512, 1, 1),
    "base_net.13.3.weight": (1024, 1024, 1, 1),
    "extras.0.0.weight": (256, 1024, 1, 1),
    "extras.0.2.weight": (512, 256, 3, 3),
    "extras.3.2.bias": (256,),
    "classification_headers.0.weight": (126, 512, 3, 3),
    "classification_headers.1.weight": (126, 1024, 3, 3),
    "classification_headers.5.weight": (126, 256, 3, 3),
    "regression_headers.0.weight": (24, 512, 3, 3),
    "regression_headers.5.bias": (24,),
}
MB2_KEYS = {
    "base_net.0.0.weight": (32, 3, 3, 3),
    "base_net.1.conv.0.weight": (32, 1, 3, 3),
    "base_net.1.conv.3.weight": (16, 32, 1, 1),
    "base_net.2.conv.0.weight": (96, 16, 1, 1),
    "base_net.14.conv.0.weight": (576, 96, 1, 1),
    "base_net.14.conv.3.weight": (576, 1, 3, 3),
    "base_net.14.conv.6.weight": (160, 576, 1, 1),
    "base_net.17.conv.6.weight": (320, 960, 1, 1),
    "base_net.18.0.weight": (1280, 320, 1, 1),
    "base_net.18.1.running_mean": (1280,),
    "extras.0.conv.0.weight": (256, 1280, 1, 1),
    "extras.0.conv.6.weight": (512, 256, 1, 1),
    "extras.3.conv.0.weight": (64, 256, 1, 1),
    "extras.3.conv.6.weight": (64, 64, 1, 1),
    "classification_headers.0.0.weight": (576, 1, 3, 3),
    "classification_headers.0.0.bias": (576,),
    "classification_headers.0.1.weight": (576,),
    "classification_headers.0.3.weight": (126, 576, 1, 1),
    "classification_headers.1.3.weight": (126, 1280, 1, 1),
    "classification_headers.5.weight": (126, 64, 1, 1),
    "regression_headers.0.3.weight": (24, 576, 1, 1),
    "regression_headers.5.weight": (24, 64, 1, 1),
}


@pytest.fixture(scope="module")
def mb1():
    torch.manual_seed(0)
    return create_ssd("mb1-ssd").eval()


@pytest.fixture(scope="module")
def mb2():
    torch.manual_seed(0)
    return create_ssd("mb2-ssd-lite").eval()


@pytest.mark.parametrize(
    "name,keys,n_params,n_tensors", [("mb1", MB1_KEYS, 9_468_996, 202), ("mb2", MB2_KEYS, 3_388_228, 478)]
)
def test_pytorch_ssd_layout(request, name, keys, n_params, n_tensors):
    model = request.getfixturevalue(name)
    sd = model.state_dict()
    for k, shape in keys.items():
        assert tuple(sd[k].shape) == shape, k
    assert len(sd) == n_tensors
    assert sum(p.numel() for p in model.parameters()) == n_params
    assert all(k.split(".")[0] in ("base_net", "extras", "classification_headers", "regression_headers") for k in sd)
    assert len(model.base_net) == (14 if name == "mb1" else 19) and len(model.extras) == 4


@pytest.mark.parametrize("name", ["mb1", "mb2"])
def test_forward_300_decode_nms(request, name):
    model = request.getfixturevalue(name)
    config = SSDConfig.for_model(model, 300)
    assert config == SSDConfig()  # exactly pytorch-ssd's published configuration
    with torch.no_grad():
        logits, regression = model(torch.randn(1, 3, 300, 300))
    assert logits.shape == (1, 3000, 21) and regression.shape == (1, 3000, 4)
    det = postprocess(logits, regression, config.priors(), config, [(375, 500)])[0]
    assert len(det["boxes"]) > 0 and det["boxes"].shape[1] == 4
    assert det["labels"].min() >= 1 and det["scores"].min() > config.score_threshold
    assert (det["scores"][:-1] >= det["scores"][1:]).all()  # batched_nms returns them by score


def test_priors_match_pytorch_ssd_config():
    priors = SSDConfig().priors()
    assert priors.shape == (3000, 4)  # 6 x (19^2 + 10^2 + 5^2 + 3^2 + 2^2 + 1)
    c = 0.5 / (300 / 16)
    small, big = 60 / 300, math.sqrt(60 * 105) / 300
    expected = [
        [c, c, small, small],
        [c, c, big, big],
        [c, c, small * 2**0.5, small / 2**0.5],
        [c, c, small / 2**0.5, small * 2**0.5],
        [c, c, small * 3**0.5, small / 3**0.5],
        [c, c, small / 3**0.5, small * 3**0.5],
    ]
    assert torch.allclose(priors[:6], torch.tensor(expected), atol=1e-6)
    # second cell of the first map moves along x (pytorch-ssd iterates rows j, then columns i)
    assert priors[6, 0] == pytest.approx(1.5 / (300 / 16)) and priors[6, 1] == pytest.approx(c)
    # the 1x1 map: centre 0.5, the big box sqrt(285 * 330) / 300 > 1 is clamped to 1
    assert priors[-5].tolist() == pytest.approx([0.5, 0.5, 1.0, 1.0])
    # another input size scales the box sizes
    cfg = SSDConfig.for_size(160, [10, 5, 3, 2, 1, 1])
    assert cfg.specs[0].min_size == pytest.approx(32.0) and cfg.priors().shape == (6 * 140, 4)


def test_box_coding_is_pytorch_ssds():
    config = SSDConfig()
    priors = config.priors()
    gt = torch.tensor([[0.1, 0.2, 0.5, 0.6], [0.6, 0.6, 0.9, 0.8]])
    targets, labels = encode_targets(gt, torch.tensor([3, 7]), priors, config)
    pos = labels > 0
    assert pos.sum() >= 2 and set(labels[pos].tolist()) == {3, 7}
    # pytorch-ssd: ((c - c_p) / wh_p / 0.1, log(wh / wh_p) / 0.2)
    i = int(pos.nonzero()[0])
    g = gt[0] if labels[i] == 3 else gt[1]
    cxcy, wh = (g[:2] + g[2:]) / 2, g[2:] - g[:2]
    manual = torch.cat([(cxcy - priors[i, :2]) / priors[i, 2:] / 0.1, torch.log(wh / priors[i, 2:]) / 0.2])
    assert torch.allclose(targets[i], manual, atol=1e-5)
    decoded = decode_boxes(targets[None], priors, config)[0]
    assert torch.allclose(decoded[pos], gt[(labels[pos] == 7).long()], atol=1e-5)


def test_postprocess_nms_per_class_and_pixel_scale():
    config = SSDConfig()
    priors = config.priors()
    gt = torch.tensor([[0.2, 0.2, 0.6, 0.6]])
    targets, labels = encode_targets(gt, torch.tensor([1]), priors, config)
    logits = torch.zeros(1, 3000, 3)
    logits[0, :, 0] = 10.0
    logits[0, labels > 0, 1] = 20.0  # every matched prior predicts the same box, class 1
    logits[0, labels > 0, 2] = 18.0  # and class 2, a bit less sure
    dets = postprocess(logits, targets[None], priors, config, [(200, 100)])[0]
    # NMS is per class: one box each for classes 1 and 2, scaled to 100 x 200 pixels
    assert sorted(dets["labels"].tolist()) == [1, 2]
    for b in dets["boxes"]:
        assert torch.allclose(b, torch.tensor([20.0, 40.0, 60.0, 120.0]), atol=1e-3)


def test_weights_roundtrip_and_clear_mismatch(tmp_path, mb2):
    path = tmp_path / "mb2.pth"
    torch.save({f"module.{k}": v for k, v in mb2.state_dict().items()}, path)
    other = create_ssd("mb2-ssd-lite")
    load_ssd_weights(other, path)
    assert all(torch.equal(a, b) for a, b in zip(other.state_dict().values(), mb2.state_dict().values()))
    with pytest.raises(ValueError, match="classification_headers.0.3.weight"):
        load_ssd_weights(create_ssd("mb2-ssd-lite", num_classes=11), path)
    with pytest.raises(ValueError, match="mb1-ssd"):
        load_ssd_weights(create_ssd("mb1-ssd"), path)


def test_distill_view_kl_is_mean_per_prior_class_kl(mb2):
    torch.manual_seed(1)
    s, t = torch.randn(2, 50, 21), torch.randn(2, 50, 21)
    T = 4.0

    class Fixed(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.logits = logits

        def forward(self, x):
            return self.logits, None

    view_s, view_t = DistillView(Fixed(s), T)(None), DistillView(Fixed(t), T)(None)
    assert view_s.shape == (2, 50 * 21)
    per_prior = F.kl_div(F.log_softmax(s / T, -1), F.softmax(t / T, -1), reduction="none").sum(-1)  # (2, 50)
    assert kl_distill(view_s, view_t, T).item() == pytest.approx(T**2 * per_prior.mean().item(), rel=1e-4)
    # the block names for FCPTS exist in a wrapped detector
    names = dict(DistillView(mb2).named_modules())
    for kind, n in [("kl-box", 6), ("mse-heads", 12), ("mse-blocks", 12 + 19 + 4)]:
        blocks = reconstruction_blocks(mb2, kind)
        assert len(blocks) == n and all(b in names for b in blocks)


def test_multibox_loss_hard_negative_mining():
    # one image, 6 priors, prior 0 positive (class 1); 3 negatives per positive: the three priors with
    # the highest background loss (-log p(background)) are priors 2, 4, 5.
    logits = torch.zeros(1, 6, 2)
    logits[0, :, 1] = torch.tensor([0.0, -1.0, 3.0, -2.0, 2.0, 1.0])
    labels = torch.tensor([[1, 0, 0, 0, 0, 0]])
    reg, tgt = torch.zeros(1, 6, 4), torch.zeros(1, 6, 4)
    reg[0, 0] = torch.tensor([0.5, -2.0, 0.0, 0.0])
    loc, cls = multibox_loss(logits, reg, labels, tgt)
    chosen = [0, 2, 4, 5]
    expected_cls = F.cross_entropy(logits[0, chosen], torch.tensor([1, 0, 0, 0]), reduction="sum")
    assert cls.item() == pytest.approx(expected_cls.item())
    assert loc.item() == pytest.approx(0.5 * 0.5**2 + (2.0 - 0.5))  # smooth L1 (beta 1), one positive
