"""The opening every method shares: a target is checked once on its way to the masks, and every method fails the
same way on bad input before any work (the command line's side: test_cli_target.py)."""

import pytest
import torch

import fcpts
from fcpts.core.masks import Sparsity, check_target
from fcpts.core.options import open_run
from fcpts.methods.fcpts import FCPTSOptions
from tests.unit.tiny import record_target_checks, tiny_net


def images() -> torch.Tensor:
    return torch.randn(16, 3, 8, 8, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def checks(monkeypatch) -> list[float]:
    return record_target_checks(monkeypatch)


def test_a_checked_target_is_passed_on_as_it_is():
    target = Sparsity(0.9)
    assert check_target(target) is target
    assert check_target(0.9) == 0.9 and isinstance(check_target(0.9), Sparsity)
    assert isinstance(target * 2, float) and not isinstance(target * 2, Sparsity)


def test_a_library_call_checks_its_target_once(checks):
    model, report = fcpts.get_method("fcpts")(tiny_net(), images(), 0.5, iterations=2, batch_size=8, progress=False)
    assert checks == [0.5]
    assert report.target_sparsity == 0.5


@pytest.mark.parametrize("method", sorted(fcpts.METHODS))
def test_every_method_refuses_a_bad_target_before_any_work(method):
    model = tiny_net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        fcpts.get_method(method)(model, images(), 1.0, progress=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_open_run_checks_places_chooses_layers_and_seeds_batches():
    model = tiny_net()
    setup = open_run(model, images(), 0.7, FCPTSOptions(batch_size=4, seed=3, exclude=["0"]))
    assert isinstance(setup.target, Sparsity) and setup.target == 0.7
    assert setup.device == torch.device("cpu")
    assert list(setup.layers) == ["3", "7"]
    assert setup.calib.batch_size == 4 and setup.calib.seed == 3
    assert open_run(model, None, 0.7, FCPTSOptions()).calib is None
    with pytest.raises(ValueError, match="teacher_mode"):
        open_run(model, images(), 0.7, FCPTSOptions(teacher_mode="bogus"))
