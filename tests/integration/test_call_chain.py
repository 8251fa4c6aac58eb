"""The numbers docs/design.md gives for the way from `--sparsity` to the masks are measured again here."""

import re

from benchmarks.code.call_chain import chain
from tasks.grid.data import resolve_data_root
from tasks.grid.paths import REPO_ROOT
from tests.conftest import require_data

DESIGN = (REPO_ROOT / "docs" / "design.md").read_text()


def quoted(key: str) -> int:
    return int(re.search(rf"<!-- {key} -->(\d+)", DESIGN).group(1))


def test_the_way_from_the_command_to_the_masks_is_what_the_design_doc_says():
    require_data("cifar10", "CIFAR-10")
    require_data("weights/cifar10/resnet20.th", "the CIFAR-10 ResNet-20 weights")
    frames, checks = chain("fcpts", resolve_data_root())
    assert frames[0] == "tasks/grid/cli.py:main" and frames[-1] == "fcpts/core/allocation.py:global_keep_masks"
    assert len(frames) == quoted("hops") <= 12  # the goal
    assert len({f.split(":")[0] for f in frames}) == quoted("hop-files")
    assert checks == quoted("target-checks") == 1
