"""Every command's thread defaults (tasks/__init__.py) and the benchmark's arithmetic that chooses them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import tasks
from benchmarks.speed.thread_policy import configurations, fair_share, to_adopt, vs_share

ROOT = Path(__file__).resolve().parents[2]
PROBE = "import os, tasks.grid.evaluate, torch; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in dir())"


@pytest.mark.parametrize("given,expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_wait_policy_is_set_before_torch_starts(given, expected):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given:
        env["OMP_WAIT_POLICY"] = given
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [expected, "True"]


@pytest.mark.parametrize("idle,expected", [(None, 2), (0.0, 1), (0.6, 1), (1.4, 1), (1.6, 2), (2.0, 2), (3.0, 2)])
def test_adaptive_threads_is_one_per_idle_core_within_1_and_the_cpus(idle, expected):
    assert tasks.adaptive_threads(2, idle) == expected


def test_adaptive_threads_are_the_default_and_off_by_request(monkeypatch):
    monkeypatch.setattr(tasks, "idle_cores", lambda: 2.0)
    monkeypatch.setattr(tasks, "usable_cpus", lambda: 2)
    assert tasks.ADAPTIVE_THREADS is True
    assert tasks.thread_settings({}) == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "2"}
    assert tasks.thread_settings({"FCPTS_THREADS": "default"}) == {"OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize(
    "environ,adaptive_default",
    [({}, True), ({"FCPTS_THREADS": "adaptive"}, False)],
)
def test_adaptive_threads_set_omp_num_threads_from_the_idle_cores(monkeypatch, environ, adaptive_default):
    monkeypatch.setattr(tasks, "idle_cores", lambda: 1.0)
    monkeypatch.setattr(tasks, "usable_cpus", lambda: 2)
    assert tasks.thread_settings(environ, adaptive_default)["OMP_NUM_THREADS"] == "1"


@pytest.mark.parametrize("environ", [{"OMP_NUM_THREADS": "2"}, {"FCPTS_THREADS": "default"}])
def test_the_users_thread_count_or_override_wins_over_adaptive(environ):
    assert "OMP_NUM_THREADS" not in tasks.thread_settings(environ, adaptive_default=True)


def test_an_unknown_fcpts_threads_value_exits_2_naming_the_choices(capsys):
    with pytest.raises(SystemExit) as e:
        tasks.thread_settings({"FCPTS_THREADS": "4"})
    assert e.value.code == 2
    assert "use 'adaptive' or 'default'" in capsys.readouterr().err


def test_configurations_cover_every_busy_count_thread_choice_and_policy_once():
    configs = configurations()
    assert len(configs) == len(set(configs)) == 3 * 3 * 2
    assert {b for b, _, _ in configs} == {0, 1, 2}
    assert {t for _, t, _ in configs} == {"default", "1", "adaptive"}
    assert {w for _, _, w in configs} == {None, "PASSIVE"}
    assert [b for b, _, _ in configs] == sorted(b for b, _, _ in configs)  # competitors start once per count


@pytest.mark.parametrize("busy,share", [(0, 1.0), (1, 1.0), (2, 2 / 3), (3, 0.5)])
def test_fair_share_of_two_cores_beside_busy_single_thread_processes(busy, share):
    assert fair_share(2, busy) == pytest.approx(share)


def test_vs_share_is_one_when_a_step_slows_exactly_by_its_lost_share():
    assert vs_share(seconds=3.0, best_alone=2.0, cpus=2, busy=2) == pytest.approx(1.0)
    assert vs_share(seconds=4.4, best_alone=1.0, cpus=2, busy=3) == pytest.approx(2.2)


def test_the_winner_names_what_to_flip():
    assert to_adopt("adaptive", "PASSIVE") == "tasks/__init__.py: set ADAPTIVE_THREADS = True"
    assert to_adopt("default", None).endswith("drop the PASSIVE default")
