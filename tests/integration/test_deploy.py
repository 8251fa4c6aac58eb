"""Deployment: ONNX export of sparse models, lossless sparse storage, runtime workers and their errors."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from tasks.deploy import driver, runtimes
from tasks.deploy.export import export_onnx, inference_copy, max_abs_diff, ort_predict
from tasks.deploy.runtimes import ort_session
from tasks.deploy.sparse_storage import (
    from_sparse_initializers,
    load_any,
    pack_bitmask,
    to_sparse_initializers,
    unpack_bitmask,
    write_sparse_files,
)
from tasks.grid.cifar_models import cifar_resnet
from tasks.grid.paths import DataNotFoundError


@torch.no_grad()
def tiny_sparse_resnet(rate: float = 0.9, seed: int = 0) -> nn.Module:
    """ResNet-20 with `rate` of every conv/linear zeroed and BN statistics that are not identity; some
    BN scales negative, so folding would create -0.0 weights if export did not clean them."""
    torch.manual_seed(seed)
    model = cifar_resnet("resnet20")
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            m.weight[torch.rand_like(m.weight) < rate] = 0.0
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.normal_(0, 1)  # about half negative
            m.bias.normal_(0, 0.1)
    return model.eval()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = tiny_sparse_resnet()
    path = tmp_path_factory.mktemp("onnx") / "r20.onnx"
    export_onnx(inference_copy(model), path, (3, 32, 32))
    return model, path, write_sparse_files(path)


def _initializers(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def test_export_matches_pytorch_and_keeps_exact_zeros(exported):
    model, path, _ = exported
    x = torch.randn(16, 3, 32, 32)
    session = ort_session(path.read_bytes())
    assert max_abs_diff(model, session, x) < 1e-4
    with torch.inference_mode():
        assert (ort_predict(session, x).argmax(1) == model(x).argmax(1).numpy()).all()
    # every pruned weight survives folding as the bit pattern 0 (no -0.0 from negative BN scales)
    zeros_torch = sum(int((m.weight == 0).sum()) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear)))
    weights = [w for w in _initializers(onnx.load(str(path))).values() if w.ndim in (2, 4)]
    assert sum(int((w.view(np.uint32) == 0).sum()) for w in weights) == zeros_torch
    assert not any(np.signbit(w[w == 0]).any() for w in weights)


def test_dynamic_batch_axis(exported):
    _, path, _ = exported
    session = ort_session(path.read_bytes())
    for n in (1, 3):
        assert session.run(None, {"input": np.zeros((n, 3, 32, 32), np.float32)})[0].shape == (n, 10)


def test_bitmask_round_trip_is_bit_exact_including_negative_zero_and_nan(exported):
    _, path, _ = exported
    model = onnx.load(str(path))
    w = next(t for t in model.graph.initializer if len(t.dims) == 4)
    arr = numpy_helper.to_array(w).copy()
    flat = arr.reshape(-1)
    flat[0], flat[1] = -0.0, np.nan  # bit patterns a value-based "== 0" test would lose or mangle
    w.CopyFrom(numpy_helper.from_array(arr, w.name))
    restored = unpack_bitmask(pack_bitmask(model))
    assert restored.SerializeToString() == model.SerializeToString()


def test_sparse_initializer_round_trip_is_bit_exact(exported):
    _, path, files = exported
    model = onnx.load(str(path))
    sparse = onnx.load(str(files["sparse_initializer"]))
    onnx.checker.check_model(sparse)  # the standard's own rules (INT64 indices, ascending, in range)
    assert len(sparse.graph.sparse_initializer) > 0
    back = from_sparse_initializers(sparse)
    a, b = _initializers(model), _initializers(back)
    assert a.keys() == b.keys()
    assert all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)
    assert back.graph.node == model.graph.node


def test_sparse_files_are_smaller_at_90_percent_and_load_in_onnxruntime(exported):
    _, path, files = exported
    dense = path.stat().st_size
    assert files["sparse_initializer"].stat().st_size < 0.35 * dense  # 0.1 * (4 + 8) / 4 = 0.3
    assert files["bitmask"].stat().st_size < 0.20 * dense  # 1/32 + 0.1 = 0.13
    x = np.random.default_rng(0).standard_normal((4, 3, 32, 32), dtype=np.float32)
    ref = ort_predict(ort_session(path.read_bytes()), x)
    native = ort_predict(ort_session(str(files["sparse_initializer"])), x)  # ORT reads sparse_initializer itself
    unpacked = ort_predict(ort_session(load_any(files["bitmask"]).SerializeToString()), x)
    assert np.array_equal(ref, native) and np.array_equal(ref, unpacked)


def test_dense_model_is_not_made_bigger(tmp_path):
    model = tiny_sparse_resnet(rate=0.0)
    path = tmp_path / "dense.onnx"
    export_onnx(inference_copy(model), path, (3, 32, 32))
    files = write_sparse_files(path)
    assert len(onnx.load(str(files["sparse_initializer"])).graph.sparse_initializer) == 0
    assert files["bitmask"].stat().st_size < path.stat().st_size * 1.01
    assert to_sparse_initializers(onnx.load(str(path))).SerializeToString() == onnx.load(str(path)).SerializeToString()


def test_onnxruntime_worker_times_interleaved_and_reports_peak_memory(exported):
    _, path, files = exported
    r = runtimes.run_worker(
        "onnxruntime",
        [
            "--models",
            str(path),
            str(files["bitmask"]),
            "--shape",
            "3",
            "32",
            "32",
            "--batch",
            "2",
            "--runs",
            "3",
            "--warmup",
            "1",
        ],
    )
    assert set(r["median_s"]) == {str(path), str(files["bitmask"])}
    assert all(len(v) == 3 and min(v) > 0 for v in r["times_s"].values())
    mem = runtimes.peak_memory("onnxruntime", path, (3, 32, 32))
    assert mem["vmhwm_mib"] > mem["vmhwm_after_import_mib"] > 10


def test_missing_runtime_is_a_clear_error(monkeypatch):
    pytest.importorskip("onnxruntime")
    try:
        __import__("deepsparse")
        pytest.skip("deepsparse is installed in this python")
    except ImportError:
        pass
    monkeypatch.setenv("FCPTS_DEEPSPARSE_PYTHON", sys.executable)
    not_installed = r"deepsparse is not installed.*pip install deepsparse==1\.8\.0"
    with pytest.raises(runtimes.RuntimeNotInstalled, match=not_installed):
        runtimes.runtime_version("deepsparse")
    with pytest.raises(runtimes.RuntimeNotInstalled, match="not installed"):
        runtimes.run_worker("deepsparse", ["--models", "x.onnx", "--shape", "3", "32", "32"])
    monkeypatch.setenv("FCPTS_OPENVINO_PYTHON", "/nonexistent/python")
    with pytest.raises(runtimes.RuntimeNotInstalled, match="cannot start /nonexistent/python.*pip install openvino"):
        runtimes.runtime_version("openvino")
    with pytest.raises(ValueError, match="unknown runtime"):
        runtimes.runtime_version("tensorrt")


def test_benchmark_lists_missing_runtimes_instead_of_failing(monkeypatch):
    from benchmarks.inference.inference import available_runtimes

    monkeypatch.setenv("FCPTS_OPENVINO_PYTHON", "/nonexistent/python")
    ok, missing = available_runtimes(["onnxruntime", "openvino", "torch"])
    assert ok == ["onnxruntime", "torch"] and "openvino" in missing and "install" in missing["openvino"]


def test_benchmark_merge_keeps_earlier_families_and_states_their_provenance(tmp_path):
    """A later family (e.g. a newly finished real sparse model) joins the table without re-timing the rest."""
    import json

    from benchmarks.inference.inference import main

    common = [
        "--size",
        "32",
        "--sparsity",
        "0.9",
        "--runtimes",
        "onnxruntime",
        "--runs-b1",
        "2",
        "--runs-b32",
        "1",
        "--warmup",
        "1",
        "--no-memory",
        "--table",
        str(tmp_path / "t7.md"),
        "--raw",
        str(tmp_path / "t7.json"),
    ]
    assert main(["--families", "resnet18", *common]) == 0
    first = json.loads((tmp_path / "t7.json").read_text())
    assert main(["--families", "mobilenet_v2", "--merge", *common]) == 0
    merged = json.loads((tmp_path / "t7.json").read_text())
    assert list(merged["families"]) == ["resnet18", "mobilenet_v2"]
    assert merged["families"]["resnet18"] == first["families"]["resnet18"]
    assert merged["provenance"] == first["provenance"] and merged["families"]["mobilenet_v2"]["provenance"]["merged"]
    table = (tmp_path / "t7.md").read_text()
    assert "| mobilenet_v2 (random weights) | 90% | onnxruntime |" in table
    assert "| resnet18 (random weights) | 90% | onnxruntime |" in table
    assert "mobilenet_v2 measured in a later run merged into this table" in table
    assert max(merged["families"]["mobilenet_v2"]["onnx_max_abs_diff"].values()) < 1e-4
    more_runs = [("3" if prev == "--runs-b1" else a) for prev, a in zip(["", *common], common)]
    assert main(["--families", "mobilenet_v2", "--merge", *more_runs]) == 2  # repetitions must match to merge


def test_torch_csr_kernels_match_dense_layers():
    from benchmarks.inference.inference import to_torch_csr

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(8, 16, 1, stride=2),
        nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.Conv2d(16, 32, 1, bias=False),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 5),
    )
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                m.weight[torch.rand_like(m.weight) < 0.8] = 0.0
    csr, share = to_torch_csr(model)
    assert sum(isinstance(m, nn.Conv2d) for m in csr.modules()) == 1  # only the 3x3 conv stays dense
    assert 0 < share < 1
    x = torch.randn(3, 8, 10, 10)
    with torch.inference_mode():
        torch.testing.assert_close(csr(x), model(x), rtol=1e-5, atol=1e-5)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        driver.load_sparse_checkpoint(tmp_path / "none.pt", "resnet20", "cifar10")
    with pytest.raises(ValueError, match="pass --model"):
        torch.save({"a": torch.zeros(1)}, tmp_path / "anon.pt")
        driver.load_sparse_checkpoint(tmp_path / "anon.pt", None, None)


def test_a_missing_unfinished_or_other_task_record_is_named_as_such(tmp_path):
    with pytest.raises(DataNotFoundError, match="run record .*none.json does not exist"):
        driver.sparse_model_from_record(tmp_path / "none.json", tmp_path, None, False)
    (tmp_path / "started.json").write_text('{"task": "cifar"}')
    with pytest.raises(DataNotFoundError, match="started.json is not a finished run record"):
        driver.sparse_model_from_record(tmp_path / "started.json", tmp_path, None, False)
    (tmp_path / "imagenet.json").write_text('{"task": "imagenet", "metrics": {"top1": 70.0}}')
    with pytest.raises(ValueError, match="python -m benchmarks inference --families records --records RECORD"):
        driver.sparse_model_from_record(tmp_path / "imagenet.json", tmp_path, None, False)


def test_deploy_cifar_checkpoint_end_to_end(tmp_path):
    """A sparse checkpoint on real CIFAR-10 test images: ONNX top-1 equals PyTorch top-1, files shrink."""
    from tests.conftest import require_data

    require_data("cifar10/test.npz.xz", "CIFAR-10's test images")
    ckpt = tmp_path / "r20-sp90.pt"
    torch.save({"state_dict": tiny_sparse_resnet().state_dict(), "model": "resnet20", "dataset": "cifar10"}, ckpt)
    rec = driver.deploy_cifar(ckpt, tmp_path, None, None, None, eval_limit=300, threads=1)
    assert rec["n_images"] == 300 and abs(rec["sparsity"] - 0.9) < 0.01
    assert all(d == 0.0 for d in rec["top1_diff_points"].values())
    assert all(d < 1e-4 for d in rec["max_abs_diff"].values())
    sizes = rec["file_bytes"]
    assert sizes["bitmask"] < sizes["sparse_initializer"] < sizes["dense"]
    assert all(m["vmhwm_mib"] > 0 for m in rec["peak_memory_onnxruntime"].values())
