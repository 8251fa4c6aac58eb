"""The drops-vs-paper table: the paper's FCPTS drop from its own dense model beside ours, and how far the
improved method is from the paper's drop, from Table 2's rows."""

import pytest

from tasks.reporting.drops import against_paper, drops_table
from tasks.reporting.paper import read_reference, table2
from tests.fake_records import cifar_record as cifar


@pytest.fixture(scope="module")
def reference():
    return read_reference()


def row(text: str, cell: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| {cell} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


def test_rows_are_the_paper_drop_ours_and_the_gap(reference, tmp_path):
    records = [cifar("fcpts", top1=87.6), cifar("fcpts-plus", top1=89.6), cifar("fcpts", sp=0.8, top1=91.0)]
    _, rows = table2(records, reference, tmp_path)
    text = drops_table(rows, reference)
    # paper Table 2, CIFAR-10 ResNet-32: dense 93.53, FCPTS 90.35 at 90% and 92.36 at 80%; our dense 92.6
    assert row(text, "CIFAR-10 resnet32 90%") == ["3.18", "5.00 [paper-cpu]", "3.00 [paper-cpu]", "met (0.18 better)"]
    assert row(text, "CIFAR-10 resnet32 80%") == ["1.17", "1.60 [paper-cpu]", "no record", "—"]
    assert row(text, "CIFAR-100 resnet56 90%") == ["4.56", "no record", "no record", "—"]
    assert sum(line.startswith("| CIFAR-") for line in text.splitlines()) == 8  # 4 models x 80/90%


def test_a_larger_drop_than_the_papers_is_short_by_the_difference():
    assert against_paper(4.00, 3.18) == "0.82 short"
    assert against_paper(3.18, 3.18) == "met (0.00 better)"
