"""Tables and figures carry the paper's own numbers: the order of the captions in the paper's tex decides them.

A reader who puts our "Table 3" beside the paper's Table 3 must be comparing the same table. The tex is read
where it sits beside the repository (`../shared/paper/fcpts-aaai24.tex`); the mapping below names, for each of
the paper's table and figure labels, the stem of the suite's file that reproduces it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tasks.grid.paths import REPO_ROOT, RESULTS_DIR
from tests.conftest import IN_CI

TEX = REPO_ROOT.parent / "shared" / "paper" / "fcpts-aaai24.tex"
TABLES = RESULTS_DIR / "tables"
FIGURES = REPO_ROOT / "paper_figures"

# The paper's label -> the stem our file carries after its number (None: nothing of ours reproduces it).
TABLE_STEMS = {
    "tab:learning_fail": "learned_masks",
    "CIFAR": "cifar",
    "ImageNet-1K": "imagenet_cnn",
    "ViT": "imagenet_vit",
    "VOC": "voc",
    "tab:reconstruction_efficiency": "time",
    "tab:inference_efficiency": "inference",
}
FIGURE_STEMS = {
    "fig:contribution": "accuracy_vs_sparsity",
    "fig:overview": None,  # the method's diagram
    "fig:bridge_function": "bridge",
    "fig:ablation_study": "fixed_vs_learned",
    "fig:sparsity_allocation": "allocation",
}
# Where a user reads table and figure names: docs, the Makefile and the code that writes or cites them (the
# README has a test of its own below).
READ_BY_USERS = [
    REPO_ROOT / "Makefile",
    *sorted((REPO_ROOT / "docs").rglob("*.md")),
    *sorted(p for part in ("fcpts", "baselines", "tasks", "benchmarks") for p in (REPO_ROOT / part).rglob("*.py")),
]
# What each of the paper's tables and figures is about, as prose names it: "Table N" or "Figure N" followed by the
# subject of another is a number left over from another numbering.
SUBJECTS = {
    "table": {
        "learned_masks": ("learned-mask", "learned mask", "STR", "ProbMask"),
        "cifar": ("CIFAR",),
        "imagenet_cnn": ("CNN",),
        "imagenet_vit": ("ViT",),
        "voc": ("VOC", "detection", "Detection"),
        "time": ("time", "Time"),
        "inference": ("inference", "CV22", "latency"),
    },
    "figure": {
        "accuracy_vs_sparsity": ("accuracy vs", "accuracy_vs"),
        "bridge": ("bridge",),
        "fixed_vs_learned": ("fixed", "learnable sparsity"),
        "allocation": ("allocation",),
    },
}


def caption_order(tex: str, kind: str) -> list[str]:
    """The labels of the tex's `kind` environments (table or figure, starred or not), in the paper's order."""
    labels = []
    for m in re.finditer(rf"\\begin\{{{kind}\*?\}}(.*?)\\end\{{{kind}\*?\}}", tex, flags=re.S):
        found = re.findall(r"\\label\{([^}]+)\}", m.group(1))
        assert len(found) == 1, f"a {kind} of the tex has labels {found}"
        labels.append(found[0])
    return labels


@pytest.fixture(scope="module")
def tex() -> str:
    if not TEX.is_file():
        message = f"the paper's tex is not at {TEX}: put the suite's shared folder beside the repository"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return TEX.read_text()


@pytest.fixture(scope="module")
def paper_numbers(tex) -> dict[tuple[str, str], int]:
    """(kind, our stem) -> the paper's number of that table or figure."""
    out = {}
    for kind, stems in (("table", TABLE_STEMS), ("figure", FIGURE_STEMS)):
        labels = caption_order(tex, kind)
        assert sorted(labels) == sorted(stems), f"the paper's {kind}s are {labels}; the mapping above names others"
        out.update({(kind, stems[label]): i for i, label in enumerate(labels, 1) if stems[label]})
    return out


def test_caption_order_is_read_from_the_tex(paper_numbers):
    # the paper's numbering, as its captions stand: STR/ProbMask first, CIFAR second; ResNet-50 first, bridge third
    assert paper_numbers[("table", "learned_masks")] == 1
    assert paper_numbers[("table", "cifar")] == 2
    assert paper_numbers[("figure", "bridge")] == 3
    assert paper_numbers[("figure", "allocation")] == 5


def test_every_table_file_and_heading_has_the_papers_number(paper_numbers):
    files = sorted(TABLES.glob("table*"))
    assert files
    for path in files:
        m = re.fullmatch(r"table(\d)_([a-z_]+)\.(md|csv|tex)", path.name)
        assert m, f"{path.name}: not tableN_<stem>.<md|csv|tex>"
        number, stem = int(m.group(1)), m.group(2)
        assert paper_numbers.get(("table", stem)) == number, f"{path.name}: the paper numbers {stem} otherwise"
        if path.suffix == ".md":
            heading = path.read_text().splitlines()[0]
            assert re.match(rf"# Table {number}\b", heading), f"{path.name} is headed {heading!r}"
    assert {int(p.name[5]) for p in files} == set(range(1, 8)), "a table of the paper has no file"


def test_every_figure_file_has_the_papers_number(paper_numbers):
    files = sorted(FIGURES.glob("*.png"))
    assert files
    for path in files:
        m = re.fullmatch(r"fig(\d)_([a-z_]+?)(_[\w-]+)?\.png", path.name)
        assert m, f"{path.name}: not figN_<stem>[_<dataset>].png"
        stem = next((s for s in FIGURE_STEMS.values() if s and path.stem[5:].startswith(s)), None)
        assert stem, f"{path.name}: no figure of the paper is named {path.stem[5:]}"
        assert paper_numbers[("figure", stem)] == int(m.group(1)), f"{path.name}: the paper numbers it otherwise"


def check_names(doc: Path, paper_numbers: dict[tuple[str, str], int]) -> None:
    """A table or figure file `doc` names exists under the paper's number; a link `[Table N](...tableM_...)` has
    N == M; "Table N (CNNs)" and the like name the table the paper gives that subject."""
    figure_stems = sorted((s for s in FIGURE_STEMS.values() if s), key=len, reverse=True)
    text = doc.read_text()
    where = doc.relative_to(REPO_ROOT)
    for name in set(re.findall(r"\b(table\d_[a-z_]+)\.", text)):
        assert any(TABLES.glob(f"{name}.*")), f"{where} names {name}, which no table file is"
    for number, rest in set(re.findall(r"\bfig(\d)_([\w<>{}-]*)\.png", text)):
        stem = next((s for s in figure_stems if rest.startswith(s)), None)
        assert stem, f"{where} names fig{number}_{rest}.png, a figure the paper does not have"
        assert paper_numbers[("figure", stem)] == int(number), f"{where}: fig{number}_{rest}.png"
    for said, linked in re.findall(r"\[(?:Table|table) (\d)\]\([^)]*table(\d)_", text):
        assert said == linked, f"{where}: a link says Table {said} and goes to table{linked}"
    for kind, subjects in SUBJECTS.items():
        name = kind.capitalize()
        for said, after in re.findall(rf"\b{name} (\d)\b(?:'s)?([^,;)]{{0,30}})", text):
            after = re.split(rf"\b[{name[0]}{kind[0]}]{kind[1:]}s?\b", after)[0]  # up to the next one named
            about = {paper_numbers[(kind, stem)] for stem, words in subjects.items() if any(w in after for w in words)}
            assert not about or int(said) in about, (
                f"{where}: '{name} {said}{after}' is about the paper's {name} {about}"
            )


def test_docs_and_code_name_tables_and_figures_by_the_papers_numbers(paper_numbers):
    for doc in READ_BY_USERS:
        check_names(doc, paper_numbers)


def test_readme_names_tables_and_figures_by_the_papers_numbers(paper_numbers):
    check_names(REPO_ROOT / "README.md", paper_numbers)
