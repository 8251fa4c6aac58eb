"""The harness beside the released FCPTS: its pure parts, without their code or any data."""

from benchmarks.code import released_fcpts as rf
from tasks.grid.cifar_models import CifarResNet


def test_keys_map_onto_the_released_resnet_naming():
    ours = CifarResNet(1, num_classes=10, option="B").state_dict()  # one block per stage, 1x1 shortcuts
    mapped = rf.release_keys(ours)
    for key in (
        "conv1.0.weight",
        "conv1.1.running_mean",
        "conv2_x.0.residual_function.0.weight",
        "conv2_x.0.residual_function.4.bias",
        "conv3_x.0.residual_function.3.weight",
        "conv3_x.0.shortcut.0.weight",
        "conv4_x.0.shortcut.1.weight",
        "fc.weight",
    ):
        assert key in mapped, key
    assert len(mapped) == len(ours)
    assert mapped["fc.weight"] is ours["linear.weight"]


def test_fit_check_names_the_shape_that_differs():
    ours = CifarResNet(1, num_classes=10, option="B").state_dict()
    theirs = rf.release_keys(ours)
    assert rf.fits_release_model(ours, theirs) is None
    theirs = {**theirs, "fc.weight": theirs["fc.weight"].new_zeros(100, 512)}  # their CIFAR ResNet's classifier
    assert "fc.weight: ours (10, 64), theirs (100, 512)" in rf.fits_release_model(ours, theirs)


def test_skips_cleanly_without_the_release_checkout(tmp_path, capsys):
    assert rf.main(["--msbench", str(tmp_path), "--out", str(tmp_path)]) == 0
    assert rf.main(["--release", str(tmp_path), "--msbench", str(tmp_path), "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("skipped: no FCPTS checkout") == 2 and "git clone https://github.com/ModelTC/FCPTS.git" in out
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_learned_masks_are_kept_beside_the_exact_step(monkeypatch):
    """Ours evaluated at its own thresholds too: the learned masks' sparsity is the one the report gives before
    the exact step, and the finished model is left with the exact step's masks."""
    import fcpts
    from tests.unit.tiny import tiny_images, tiny_net

    monkeypatch.setattr(rf, "evaluate", lambda model, inputs: {"top1": 0.0})
    with rf.learned_masks_kept() as learned:
        model, report = fcpts.sparsify(tiny_net(), tiny_images(), 0.7, iterations=3, batch_size=8, progress=False)
    at = rf.at_learned_masks(model, learned, None)
    assert set(learned) == {row["name"] for row in report.per_layer}
    assert at["achieved_sparsity"] == report.extra["sparsity_before_exact_step"]
    assert fcpts.sparsity_summary(model)[0] == report.achieved_sparsity


def test_the_summary_gives_each_side_s_seeds_their_spread_and_ours_at_the_learned_masks():
    def record(side, seed, top1, learned=None):
        r = {"model": "resnet56", "target_sparsity": 0.9, "iterations": 160, "side": side, "seed": seed,
             "metrics": {"top1": top1}, "achieved_sparsity": 0.9}  # fmt: skip
        return {**r, "at_learned_masks": learned} if learned else r

    learned = {"metrics": {"top1": 85.0}, "achieved_sparsity": 0.9069}
    text = rf.summary(
        [record("release", 1, 86.0), record("release", 0, 85.0), record("ours-release", 0, 78.0, learned)]
    )
    assert "| resnet56 | 90% | 160 | release | 2 | 85.50 ± 0.71 (85.00, 86.00) | 0.90000, 0.90000 | — |" in text
    assert "| ours-release | 1 | 78.00 (78.00) | 0.90000 | 85.00 (0.90690) |" in text
    assert "| resnet56 | 90% | 1600 | paper's Table 2 (GPU) | | 92.02 | | |" in text
