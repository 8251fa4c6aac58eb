"""The committed phase-by-phase memory of FCPTS and ProbMask (benchmarks/scale/memory_phases.py) and what
docs/memory.md reads off it: the teacher's copy, the training loop's peak and the run's, in copies of the weights."""

from __future__ import annotations

import re

from tasks.grid.paths import REPO_ROOT, RESULTS_DIR

OUT = RESULTS_DIR / "benchmarks" / "memory_phases_vit_base_fcpts.txt"
DOC = REPO_ROOT / "docs" / "memory.md"


def phases(path) -> dict[str, tuple[float, float]]:
    """phase -> (copies of the weights at its end, highest within it)."""
    rows = {}
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"(\S.*?)\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+([\d.]+)", line)
        if m:
            rows[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return rows


def test_the_output_names_its_setting_and_provenance():
    text = OUT.read_text()
    assert "fcpts on vit_base (86.6 M parameters" in text and "MALLOC_MMAP_THRESHOLD_=1048576" in text
    assert re.search(r"^commit [0-9a-f]{40},", text, re.M) and "OMP_NUM_THREADS=1" in text


def test_the_doc_reads_its_copies_off_the_output():
    rows = phases(OUT)
    teacher = rows["frozen_teacher"][0] - rows["run: setup"][0]
    loop = rows["train_loop"][1] - rows["after _Thresholds"][0]
    run = max(high for _, high in rows.values()) - rows["build the model"][0]
    doc = " ".join(DOC.read_text().split())
    for quoted in (
        f"the teacher's copy adds {teacher:.1f} copies of the weights",
        f"the training loop's peak lies {loop:.1f} copies above",
        f"the run's peak is {run:.1f} copies above the model it was given",
    ):
        assert quoted in doc, quoted
    # at most gradients, momentum, the step's masks and masked weights (four copies); the masked weights go in the
    # backward as the gradients come
    assert 3.0 <= loop <= 5.0


def test_the_doc_s_glibc_default_numbers_are_that_output_s():
    fixed, default = phases(OUT), phases(OUT.with_name("memory_phases_vit_base_fcpts_glibc_default.txt"))
    assert (
        "MALLOC_MMAP_THRESHOLD_=unset (glibc default)"
        in OUT.with_name("memory_phases_vit_base_fcpts_glibc_default.txt").read_text()
    )
    peak = {name: max(high for _, high in rows.values()) for name, rows in (("fixed", fixed), ("default", default))}
    end = {name: rows["after _exact_step"][0] for name, rows in (("fixed", fixed), ("default", default))}
    doc = " ".join(DOC.read_text().split())
    assert f"peaks at {peak['default']:.1f} copies instead of {peak['fixed']:.1f}" in doc
    assert f"ends at {end['default']:.1f} instead of {end['fixed']:.1f}" in doc


def test_the_doc_reads_probmask_s_copies_off_its_output():
    path = OUT.with_name("memory_phases_vit_base_probmask.txt")
    assert "probmask on vit_base (86.6 M parameters" in path.read_text()
    assert "MALLOC_MMAP_THRESHOLD_=1048576" in path.read_text()
    rows = phases(path)
    teacher = rows["frozen_teacher"][0] - rows["run: setup"][0]
    scores = rows["after frozen_teacher"][0] - rows["frozen_teacher"][0]
    loop = rows["train_loop"][1] - rows["after frozen_teacher"][0]
    run = max(high for _, high in rows.values()) - rows["build the model"][0]
    export = rows["export_masks"][1] - rows["after train_loop"][0]
    doc = " ".join(DOC.read_text().split())
    for quoted in (
        f"the teacher's copy adds {teacher:.1f} copies of the weights and the keep-scores {scores:.1f} more",
        f"the training loop's peak lies {loop:.1f} copies above the resident set before it",
        f"the run's peak is {run:.1f} copies above the model it was given, against the formula's 8",
        f"its peak lies {export:.1f} copies above the resident set it starts from",
    ):
        assert quoted in doc, quoted
    assert abs(run - 8) <= 1.0, "the formula (16P + 20Pw less the student's 4P) within one copy"
