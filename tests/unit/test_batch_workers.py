"""Calibration batches made by worker processes: the same values as made in the main process (random transforms
included), in step order, a bad batch failing at its own step with its own message, and a run whose result does
not depend on how many workers made its batches."""

import types

import pytest
import torch
from torch import nn
from torch.utils.data import Dataset

import fcpts
from fcpts.core.batch_workers import WorkerBatches, calibration_workers, default_workers
from fcpts.core.calibration import Calibration
from fcpts.core.loop import StepBatches
from fcpts.core.options import TrainingOptions
from tests.unit.tiny import untimed


class Jittered(Dataset):
    """Images with a random shift drawn from torch's RNG, as torchvision's random transforms draw theirs; image
    `bad` holds a NaN."""

    def __init__(self, n: int = 24, bad: int | None = None):
        self.x = torch.randn(n, 3, 8, 8, generator=torch.Generator().manual_seed(0))
        self.bad = bad

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x = self.x[i] + torch.rand(())
        if i == self.bad:
            x = x.clone()
            x[0, 0, 0] = float("nan")
        return x, 0


def test_workers_make_each_step_the_batch_made_here():
    calib = Calibration(Jittered(), batch_size=4, seed=3)
    batches = StepBatches(calib, torch.device("cpu"))
    with batches.from_workers(2, start=2, stop=14):
        assert isinstance(batches.host, WorkerBatches) and batches.workers == 2
        made = [batches(step) for step in range(2, 14)]  # three epochs, each shuffled by its own seed
    assert batches.host == calib.batch  # in this process again once closed
    here = [batches(step) for step in range(2, 14)]
    assert all(torch.equal(a, b) for a, b in zip(made, here))
    assert not torch.equal(made[0], made[6])  # the same images a later epoch, jittered anew


def test_a_step_asked_out_of_order_is_made_here():
    calib = Calibration(Jittered(), batch_size=4, seed=0)
    made = WorkerBatches(calib, start=0, stop=6, workers=1, pin=False)
    assert torch.equal(made(0), calib.batch(0))
    assert torch.equal(made(3), calib.batch(3)) and made.made is None  # the order broke: the workers stopped
    assert torch.equal(made(4), calib.batch(4)) and made.made is None  # and stay stopped


def test_a_bad_batch_fails_at_its_own_step_with_its_own_message():
    calib = Calibration(Jittered(bad=5), batch_size=4, seed=0)
    bad_step = next(step for step in range(6) if 5 in calib.order(0)[step * 4 : step * 4 + 4])
    made = WorkerBatches(calib, start=0, stop=6, workers=2, pin=False)
    for step in range(bad_step):
        assert torch.equal(made(step), calib.batch(step))
    with pytest.raises(ValueError, match=r"^calibration images \(dataset indices 5\) contain NaN or Inf"):
        made(bad_step)


def net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))


@pytest.mark.parametrize("method", ["fcpts", "probmask"])
def test_a_run_is_the_same_whoever_made_its_batches(method):
    runs = {}
    for workers in (0, 2):
        model, report = fcpts.get_method(method)(
            net(), Jittered(), 0.5, iterations=7, batch_size=4, progress=False, calibration_workers=workers
        )
        runs[workers] = model.state_dict(), untimed(report.history)
        assert report.extra.get("batch_workers") == (workers or None)  # a run without workers reports as before
    (here, here_history), (made, made_history) = runs[0], runs[2]
    assert all(torch.equal(a, b) for a, b in zip(here.values(), made.values())) and here_history == made_history


def test_unasked_workers_feed_a_gpu_and_leave_a_cpu_alone():
    host = Calibration(Jittered(), batch_size=4, seed=0)
    assert calibration_workers(None, host, torch.device("cpu")) == 0
    assert calibration_workers(None, host, torch.device("cuda")) == default_workers() >= 1
    assert calibration_workers(3, host, torch.device("cpu")) == 3
    on_device = types.SimpleNamespace(data=torch.empty(4, 3, 8, 8, device="meta"))
    assert calibration_workers(None, on_device, torch.device("cuda")) == 0  # indexed where it is
    with pytest.raises(ValueError, match="calibration tensor is on meta.*calibration_workers=0"):
        calibration_workers(2, on_device, torch.device("cuda"))


def test_a_negative_worker_count_is_refused_before_any_work():
    with pytest.raises(ValueError, match="calibration_workers must be >= 0"):
        TrainingOptions(calibration_workers=-1).validate()


class NotInWorkers(Jittered):
    """A Dataset that cannot be read in a worker process (as one holding a handle that does not survive a fork)."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError("this handle does not survive a fork")
        return super().__getitem__(i)


def test_workers_that_fail_where_this_process_does_not_hand_over_with_a_warning(caplog):
    calib = Calibration(NotInWorkers(), batch_size=4, seed=0)
    made = WorkerBatches(calib, start=0, stop=4, workers=1, pin=False)
    with caplog.at_level("WARNING", logger="fcpts"):
        batches = [made(step) for step in range(4)]
    assert all(torch.equal(b, calib.batch(step)) for step, b in enumerate(batches)) and made.made is None
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "a worker process failed at step 0 (RuntimeError" in warning
    assert "calibration_workers=0" in warning
