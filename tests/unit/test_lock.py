"""One process per cell, even when many find a dead process's lock at the same moment: exactly one takes it over,
and none removes the lock another has just taken. This module imports no torch, so its spawned racers start fast."""

import json
import multiprocessing
import socket
import subprocess
import time
from pathlib import Path

from tasks.grid import status as lock_module
from tasks.grid.status import CellBusy, cell_lock

RACERS = 6
ROUNDS = 10  # the takeover by unlink and create let two or more racers in on every round of this race


def _dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def _race(folder: str, start, hold, won) -> None:
    """Each round: start with the others, try the round's cell, and keep what was won until all have tried. Asking
    whether the holder's process lives takes 10 ms, as for a racer preempted between looking and acting."""
    alive = lock_module.pid_alive
    lock_module.pid_alive = lambda pid: time.sleep(0.01) or alive(pid)
    mine = []
    for r in range(ROUNDS):
        start.wait(timeout=30)
        try:
            with cell_lock(Path(folder) / f"cell{r}.json"):
                mine.append(r)
                hold.wait(timeout=30)
        except CellBusy:
            hold.wait(timeout=30)
    won.put(mine)


def test_racers_over_a_dead_process_s_lock_let_exactly_one_in(tmp_path):
    stale = json.dumps({"pid": _dead_pid(), "host": socket.gethostname()})
    for r in range(ROUNDS):
        (tmp_path / f"cell{r}.json.lock").write_text(stale)
    ctx = multiprocessing.get_context("spawn")
    start, hold, won = ctx.Barrier(RACERS), ctx.Barrier(RACERS), ctx.Queue()
    racers = [ctx.Process(target=_race, args=(str(tmp_path), start, hold, won)) for _ in range(RACERS)]
    for p in racers:
        p.start()
    wins = [r for _ in racers for r in won.get(timeout=120)]
    for p in racers:
        p.join(30)
    assert [p.exitcode for p in racers] == [0] * RACERS
    twice = sorted({r for r in wins if wins.count(r) > 1})
    assert not twice and sorted(wins) == list(range(ROUNDS)), f"rounds with two or more in: {twice}"
    assert not list(tmp_path.glob("*.lock"))  # each winner removed its lock, and only its own


def test_a_live_process_s_lock_is_respected_and_kept(tmp_path):
    lock = tmp_path / "cell.json.lock"
    with cell_lock(tmp_path / "cell.json"):
        holder = lock.read_text()
        try:
            with cell_lock(tmp_path / "cell.json"):
                raise AssertionError("a second holder got in")
        except CellBusy as e:
            assert f"pid {json.loads(holder)['pid']}" in str(e)
        assert lock.read_text() == holder
    assert not lock.exists()
