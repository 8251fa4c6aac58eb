"""The detection task on mmdet detectors (tasks/voc/mmdet/): the config builds, calibration images are the
test pipeline's, a tiny pruning cell ends exactly sparse with a full record, mmdet's VOCMetric agrees with the
suite's VOC07 mAP on the same detections, and dense training resumes. Skipped without the `[mmdet]` extra."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import require_data, require_mmdet

require_mmdet()

import tasks.voc as voc_cli  # noqa: E402
from fcpts.core.io import file_sha256  # noqa: E402
from fcpts.core.masks import prunable_layers  # noqa: E402
from tasks.grid.cifar_data import load_cifar  # noqa: E402
from tasks.grid.paths import (  # noqa: E402
    REPO_ROOT,
    RESULTS_DIR,
    resolve_data_root,  # noqa: E402
)
from tasks.grid.records import read_record  # noqa: E402
from tasks.grid.rerun import grid_for_record  # noqa: E402
from tasks.grid.runner import Where  # noqa: E402
from tasks.voc import make_set as mds  # noqa: E402
from tasks.voc.data import DetectionImages, VOCDetection  # noqa: E402
from tasks.voc.grid import PROFILES  # noqa: E402
from tasks.voc.metrics import voc07_map  # noqa: E402
from tasks.voc.mmdet import train as mmdet_train  # noqa: E402
from tasks.voc.mmdet.data import (  # noqa: E402
    PipelineImages,
    build_dataset,
    config_test_pipeline,
    evaluate_detector,
    find_layout,
)
from tasks.voc.mmdet.detector import (  # noqa: E402
    HeadOutputView,
    build_detector,
    load_config,
    load_weights,
    quiet_mmengine,
    reconstruction_blocks,
)
from tasks.voc.mmdet.grid import build_grid  # noqa: E402
from tasks.voc.ssd import SSDConfig, create_ssd, load_ssd_weights, postprocess  # noqa: E402
from tests.integration.tiny_voc import write_tiny_voc  # noqa: E402

CONFIG = REPO_ROOT / "tasks" / "voc" / "mmdet" / "configs" / "ssdlite_mobilenetv2_voc-cifar10-160.py"
MEAN, STD = np.array([123.675, 116.28, 103.53]), np.array([58.395, 57.12, 57.375])


def _instances(rows: list[dict]) -> dict[str, torch.Tensor]:
    boxes = torch.tensor([r["bbox"] for r in rows], dtype=torch.float32).reshape(-1, 4)
    return {"bboxes": boxes, "labels": torch.tensor([r["bbox_label"] for r in rows], dtype=torch.int64)}


def mmdet_voc_map(detections: dict[str, dict[str, torch.Tensor]], dataset) -> dict[str, float]:
    """mmdet's VOC metric on the suite's detections over an mmdet VOCDataset's own ground truth, as fractions:
    VOCMetric (the devkit's legacy +1 box widths) and `eval_map` without the +1 (the suite's convention)."""
    from mmdet.evaluation import VOCMetric
    from mmdet.evaluation.functional import eval_map

    metric = VOCMetric(metric="mAP", eval_mode="11points")
    metric.dataset_meta = dataset.metainfo
    samples = []
    for i in range(len(dataset)):
        info = dataset.get_data_info(i)
        det = detections[str(info["img_id"])]
        samples.append(
            {
                "gt_instances": _instances([r for r in info["instances"] if not r["ignore_flag"]]),
                "ignored_instances": _instances([r for r in info["instances"] if r["ignore_flag"]]),
                "pred_instances": {"bboxes": det["boxes"], "scores": det["scores"], "labels": det["labels"] - 1},
            }
        )
    with quiet_mmengine():
        metric.process({}, samples)
        legacy = metric.compute_metrics(metric.results)["mAP"]
        gts, preds = zip(*metric.results)
        plain, _ = eval_map(list(preds), list(gts), iou_thr=0.5, dataset=list(dataset.metainfo["classes"]),
                            eval_mode="11points", use_legacy_coordinate=False, logger="silent")  # fmt: skip
    return {"vocmetric": float(legacy), "no_plus_one": float(plain)}


@pytest.fixture(scope="module")
def tiny_voc(tmp_path_factory):
    """6 trainval + 4 test canvases with the substitute set's 10 classes (random-pixel objects: fast)."""
    return write_tiny_voc(tmp_path_factory.mktemp("voc"))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """An untrained detector of the repository's config, saved as an mmdet checkpoint."""
    torch.manual_seed(0)
    detector = build_detector(load_config(CONFIG))
    path = tmp_path_factory.mktemp("ckpt") / "ssdlite.pth"
    torch.save({"state_dict": detector.state_dict(), "meta": {"epoch": 0}}, path)
    return path


@pytest.fixture(scope="module")
def cell(tiny_voc, checkpoint, tmp_path_factory):
    """One tiny FCPTS cell at 70% through `python -m tasks.voc --framework mmdet`."""
    runs = tmp_path_factory.mktemp("runs")
    argv = ["--framework", "mmdet", "--config", str(CONFIG), "--weights", str(checkpoint),
            "--data-root", str(tiny_voc), "--methods", "fcpts", "--sparsity", "0.7", "--profile", "quick",
            "--results-dir", str(runs), "--no-progress"]  # fmt: skip
    assert voc_cli.main(argv) == 0
    path = runs / "voc" / "voc-tiny" / "mmdet-ssdlite_mobilenetv2_voc-cifar10-160" / "fcpts-sp70-quick-seed0.json"
    return read_record(path), runs


def test_config_builds_the_detector_and_its_view():
    detector = build_detector(load_config(CONFIG))
    assert type(detector).__name__ == "SingleStageDetector" and detector.bbox_head.num_classes == 10
    view = HeadOutputView(detector).eval()
    anchors = (10 * 10 + 5 * 5 + 3 * 3 + 2 * 2 + 1 + 1) * 6  # feature maps 10, 5, 3, 2, 1, 1 at 160 px
    with torch.no_grad():
        logits, boxes = view.head_outputs(torch.randn(2, 3, 160, 160))
        out = view(torch.randn(2, 3, 160, 160))
    assert logits.shape == (2, anchors, 11) and boxes.shape == (2, anchors, 4)
    # per anchor, T * log p sums (after exp(./T)) to one distribution over the 10 classes + background
    probs = (out.view(2, anchors, 11) / view.temperature).exp().sum(-1)
    assert torch.allclose(probs, torch.ones_like(probs), atol=1e-5)
    names = dict(view.named_modules())
    blocks = reconstruction_blocks(view, "mse-blocks")
    assert blocks[:2] == ["box_regression", "class_logits"] and all(b in names for b in blocks)
    assert {"detector.backbone.conv1", "detector.backbone.layer7.0"} <= set(blocks)
    assert reconstruction_blocks(view, "kl-box") == ["box_regression"]
    # every conv is prunable, the head's last classification and regression convs included
    layers = prunable_layers(view)
    assert len(layers) == 88 and {"detector.bbox_head.cls_convs.5.1", "detector.bbox_head.reg_convs.5.1"} <= set(layers)


def test_calibration_images_are_the_test_pipeline_without_labels(tiny_voc, checkpoint):
    import mmcv

    grid = build_grid(
        config=CONFIG, profile=PROFILES["quick"], where=Where(data_root=str(tiny_voc), weights=str(checkpoint))
    )
    images, info = grid.make_calibration(4, False)
    assert info["labels_used"] is False and info["n_images"] == 4 and len(info["image_ids"]) == 4
    assert all(type(t).__name__ != "LoadAnnotations" for t in images.dataset.pipeline.transforms)
    x, index = images[0]
    # by hand: the config's test pipeline (cv2 bilinear resize to 160 x 160), then the data preprocessor
    bgr = mmcv.imread(str(tiny_voc / "VOCdevkit" / "VOC2007" / "JPEGImages" / f"{info['image_ids'][0]}.jpg"))
    rgb = mmcv.imresize(bgr, (160, 160), interpolation="bilinear")[..., ::-1].astype(np.float64)
    expected = torch.from_numpy(((rgb - MEAN) / STD).transpose(2, 0, 1).copy()).float()
    assert index == info["indices"][0] and x.shape == (3, 160, 160)
    assert torch.allclose(x, expected, atol=1e-4)
    flipped, _ = grid.make_calibration(4, True)
    assert flipped.flip and info["indices"] == flipped.indices


def test_coco_layout_calibrates_and_scores_with_coco_metric(tiny_voc, checkpoint, tmp_path):
    """The same images in the COCO layout: classes from the json, CocoMetric through the test loop."""
    voc = tiny_voc / "VOCdevkit" / "VOC2007"
    (tmp_path / "annotations").mkdir()
    for split, coco_split in (("trainval", "train2017"), ("test", "val2017")):
        data = VOCDetection(voc, split)
        (tmp_path / coco_split).mkdir()
        images, annotations = [], []
        for k, a in enumerate(data.annotations):
            (tmp_path / coco_split / f"{a.image_id}.jpg").write_bytes(
                (voc / "JPEGImages" / f"{a.image_id}.jpg").read_bytes()
            )
            images.append({"id": k + 1, "file_name": f"{a.image_id}.jpg", "width": a.width, "height": a.height})
            for box, label in zip(a.boxes.tolist(), a.labels.tolist()):
                x1, y1, x2, y2 = box
                box = {"bbox": [x1, y1, x2 - x1, y2 - y1], "area": (x2 - x1) * (y2 - y1), "iscrowd": 0}
                annotations.append({"id": len(annotations) + 1, "image_id": k + 1, "category_id": label, **box})
        categories = [{"id": i, "name": n} for i, n in enumerate(data.class_names) if i > 0]
        (tmp_path / "annotations" / f"instances_{coco_split}.json").write_text(
            json.dumps({"images": images, "annotations": annotations, "categories": categories})
        )
    layout = find_layout(tmp_path)
    assert layout.kind == "coco" and layout.classes == tuple(mds.CIFAR10_CLASSES)
    assert (layout.calibration_split, layout.eval_split) == ("train2017", "val2017")
    cfg = load_config(CONFIG)
    detector = build_detector(cfg)
    load_weights(detector, checkpoint)
    calibration = build_dataset(layout, layout.calibration_split, config_test_pipeline(cfg))
    images = PipelineImages(calibration, detector.data_preprocessor, [0, 5])
    assert len(calibration) == 6 and images[1][0].shape == (3, 160, 160)
    metrics = evaluate_detector(detector, layout, config_test_pipeline(cfg), limit=3)
    assert metrics["n_images"] == 3 and {"map", "map50"} <= set(metrics) and "coco/bbox_mAP" in metrics["mmdet_metrics"]


def test_tiny_cell_is_exactly_sparse(cell):
    record, runs = cell
    n = record["pruned_layers"]["n_weights"]
    assert record["achieved_sparsity"] == round(0.7 * n) / n and record["hit_target"]
    state = ()
    model_path = (
        runs / "models" / "voc" / "voc-tiny" / "mmdet-ssdlite_mobilenetv2_voc-cifar10-160" / "fcpts-sp70-quick-seed0.pt"
    )
    state = torch.load(model_path, weights_only=True)
    weights = [v for k, v in state.items() if k.endswith(".weight") and v.dim() == 4]
    assert sum(w.numel() for w in weights) == n  # every conv is pruned, none kept dense
    assert sum(int((w == 0).sum()) for w in weights) == round(0.7 * n)
    assert record["metrics"]["n_images"] == 4 and 0 <= record["metrics"]["map50"] <= 100
    assert "pascal_voc/mAP" in record["metrics"]["mmdet_metrics"] and "map50" in record["dense_metrics"]


def test_record_provenance(cell, checkpoint, tiny_voc, tmp_path):
    import mmcv
    import mmdet
    import mmengine

    record, _ = cell
    assert record["task"] == "voc" and record["framework"] == "mmdet"
    assert (record["dataset"], record["model"]) == ("voc-tiny", "mmdet-ssdlite_mobilenetv2_voc-cifar10-160")
    versions = record["mmdet"]
    assert (versions["mmdet"], versions["mmengine"], versions["mmcv"]) == (
        mmdet.__version__,
        mmengine.__version__,
        mmcv.__version__,
    )
    config = versions["config"]
    assert config["name"] == CONFIG.stem and config["sha256"] == file_sha256(CONFIG)
    assert len(config["resolved_sha256"]) == 64 and config["path"] == str(CONFIG.relative_to(REPO_ROOT))
    assert record["weights"]["sha256"] == file_sha256(checkpoint) and record["weights"]["path"] == str(checkpoint)
    assert record["pruned_layers"]["n_layers"] == 88 and record["pruned_layers"]["excluded"] == []
    assert record["calibration"]["labels_used"] is False and record["substitute"] is True
    assert record["profile"]["methods"]["fcpts"]["options"]["block_names"][:2] == ["box_regression", "class_logits"]
    for key in ("command", "git_commit", "environment", "mask_sha256", "per_layer", "calibration"):
        assert record[key]
    # the record rebuilds its grid (the detection task's driver registers "voc" and hands mmdet records on)
    import tasks.voc.grid  # noqa: F401

    grid = grid_for_record(record, Where(data_root=str(tiny_voc), runs_dir=tmp_path))
    assert (grid.task, grid.dataset, grid.model, grid.profile.name) == ("voc", "voc-tiny", record["model"], "quick")
    # a record made before the task's package took the task's name names the config at its old path
    moved = json.loads(json.dumps(record))
    moved["mmdet"]["config"]["path"] = config["path"].replace("tasks/voc/", "tasks/detection/")
    assert grid_for_record(moved, Where(data_root=str(tiny_voc), runs_dir=tmp_path)).model == record["model"]


def test_vocmetric_agrees_with_the_suite_on_the_substitute_set(tmp_path):
    """The first 100 test images of the substitute set (the same bytes as `make voc-substitute`'s), the suite's
    committed SSD's detections, scored by the suite's voc07_map and by mmdet's VOCMetric."""
    require_data("cifar100", "CIFAR-100 (the substitute set's scene canvases)")
    root = resolve_data_root()
    objects, labels = load_cifar(root, "cifar10", "test")
    folder = mds.prepare_folder(tmp_path)
    sources = (objects, labels, mds._scenes(root, "test"))
    mds.write_split(folder, "test", range(4001, 4101), sources, seed=0, tag=2, log=lambda s: None)
    test = VOCDetection(folder, "test")
    ssd = create_ssd("mb2-ssd-lite", len(test.class_names)).eval()
    load_ssd_weights(ssd, RESULTS_DIR / "weights" / "voc-cifar10" / "mb2-ssd-lite-160.pth")
    config = SSDConfig.for_model(ssd, 160)
    detections = {}
    with torch.inference_mode():
        for x, idx in torch.utils.data.DataLoader(DetectionImages(test, 160), batch_size=50):
            sizes = [(test.annotations[i].height, test.annotations[i].width) for i in idx]
            for i, d in zip(idx, postprocess(*ssd(x), config.priors(), config, sizes)):
                detections[test.ids[i]] = d
    result = voc07_map(detections, test.annotations, test.class_names)
    suite = result["map"] / 100
    load_config(CONFIG)  # mmdet's registry scope
    mmdet_map = mmdet_voc_map(detections, build_dataset(find_layout(tmp_path), "test", []))
    assert suite > 0.2 and result["n_detections"] > 500  # real detections, not an empty agreement
    # mmdet's eval_map without the VOC devkit's +1 on box widths is the suite's rule: the same number
    assert mmdet_map["no_plus_one"] == pytest.approx(suite, abs=1e-6)
    # VOCMetric (+1 widths, IoU >= 0.5) agrees to the third decimal
    assert mmdet_map["vocmetric"] == pytest.approx(suite, abs=5e-4)


def test_dense_training_runs_and_resumes(tiny_voc, tmp_path):
    folders = ["--work-dir", str(tmp_path / "work"), "--results-dir", str(tmp_path / "weights")]
    small = ["--train-limit", "4", "--batch-size", "2", "--eval-limit", "2"]
    base = ["--config", str(CONFIG), "--data-root", str(tiny_voc), *folders, *small]
    assert mmdet_train.main([*base, "--epochs", "1"]) == 0
    weights = tmp_path / "weights" / "voc-tiny" / "mmdet-ssdlite_mobilenetv2_voc-cifar10-160.pth"
    first = json.loads(weights.with_suffix(".json").read_text())
    assert [(s["start_iter"], s["end_iter"]) for s in first["sessions"]] == [(0, 2)]
    assert first["recipe"]["iterations"] == 2 and "pascal_voc/mAP" in first["final_test"]
    # a longer schedule continues from the saved epoch instead of starting again
    assert mmdet_train.main([*base, "--epochs", "2"]) == 0
    second = json.loads(weights.with_suffix(".json").read_text())
    assert [(s["start_iter"], s["end_iter"]) for s in second["sessions"]] == [(0, 2), (2, 4)]
    # the exported weights load strictly into the config's detector
    assert load_weights(build_detector(load_config(CONFIG)), weights)["iter"] == 4


def test_a_checkpoint_of_another_model_is_one_line_naming_it_and_the_model(tiny_voc, checkpoint, tmp_path, capsys):
    state = torch.load(checkpoint, weights_only=True)["state_dict"]
    other = tmp_path / "other.pth"
    torch.save({"state_dict": {k: v for k, v in list(state.items())[5:]}}, other)  # 5 keys short
    argv = ["--framework", "mmdet", "--config", str(CONFIG), "--weights", str(other), "--data-root", str(tiny_voc),
            "--methods", "fcpts", "--profile", "quick", "--results-dir", str(tmp_path / "runs")]  # fmt: skip
    assert voc_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: checkpoint {other} does not fit the model mmdet-ssdlite_mobilenetv2_voc-cifar10-160")
    assert "5 missing" in err and err.count("\n") == 1


def test_a_detector_with_a_head_output_the_methods_never_distil_is_refused_naming_its_layers():
    """FCOS's centerness conv feeds neither the class logits nor the box regression: pruned, it would get no
    gradient, its mask never learned."""
    from tasks.voc.mmdet.detector import check_layers_reach_outputs

    check_layers_reach_outputs(HeadOutputView(build_detector(load_config(CONFIG))))  # SSDlite: every layer feeds them
    import mmdet

    configs = Path(mmdet.__file__).parent / ".mim" / "configs"
    fcos = configs / "fcos" / "fcos_r18_fpn_gn-head-center-normbbox-centeronreg-giou_8xb8-amp-lsj-200e_coco.py"
    with pytest.raises(ValueError, match=r"FCOS: detector.bbox_head.conv_centerness feed no output the methods"):
        check_layers_reach_outputs(HeadOutputView(build_detector(load_config(fcos))))


class _RunsCode:
    """A pickle that, unpickled without weights-only, runs code: it touches a file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"import pathlib; pathlib.Path({self.marker!r}).touch()",)


def test_a_checkpoint_a_config_names_never_runs_code_when_training_loads_it(tiny_voc, tmp_path, capsys):
    """Training keeps torch's weights-only loading: a backbone checkpoint named in a (data-only) config that is a
    malicious pickle is refused in one line naming the config, and its code never runs."""
    marker, evil = tmp_path / "ran", tmp_path / "evil.pth"
    torch.save({"state_dict": {}, "meta": _RunsCode(marker)}, evil)
    config = tmp_path / "evil_config.py"
    config.write_text(
        f"_base_ = [{str(CONFIG)!r}]\n"
        f"model = dict(backbone=dict(init_cfg=dict(_delete_=True, type='Pretrained', checkpoint={str(evil)!r})))\n"
    )
    folders = ["--work-dir", str(tmp_path / "work"), "--out-dir", str(tmp_path / "weights")]
    argv = ["--config", str(config), "--data-root", str(tiny_voc), *folders, "--train-limit", "2", "--epochs", "1"]
    assert mmdet_train.main(argv) == 2
    err = capsys.readouterr().err
    assert not marker.exists(), "the checkpoint's code ran"
    assert "error: " in err and str(config) in err and "weights-only" in err


def test_resuming_allows_the_message_hub_s_statistics_and_no_other_getattr():
    from mmengine.logging import HistoryBuffer

    from tasks.voc.mmdet.train import _history_statistic

    assert _history_statistic(HistoryBuffer, "mean") is HistoryBuffer.mean
    for owner, name in [(HistoryBuffer, "__init__"), (HistoryBuffer, "__class__"), (json, "loads")]:
        with pytest.raises(Exception, match="refused"):
            _history_statistic(owner, name)


@pytest.mark.parametrize("flag", ["--config", "--model", "--models"])
def test_the_config_is_named_as_every_task_names_its_model(flag):
    from tasks.grid.cli import parse_args

    assert parse_args("coco", [flag, str(CONFIG), "--methods", "fcpts", "--dry-run"]).config == str(CONFIG)


def test_the_evaluation_loader_takes_the_workers_default_of_the_other_tasks():
    """None: min(8, CPUs), as tasks.grid.evaluate's loaders; the task's flag leaves it to that default."""
    import inspect

    from tasks.grid.cli import parse_args

    assert inspect.signature(evaluate_detector).parameters["workers"].default is None
    assert inspect.signature(build_grid).parameters["workers"].default is None
    assert parse_args("coco", ["--config", str(CONFIG)]).workers is None
