"""The detection task's command (`python -m tasks.voc`) on a VOC-layout folder.

`--framework suite` (default): the suite's own SSDs (tasks/voc/grid.py). `--framework mmdet`: any
single-stage mmdet detector from its config and checkpoint (tasks/voc/mmdet/, needs the `[mmdet]` extra);
`python -m tasks.voc --framework mmdet --help` lists its flags.
"""

from __future__ import annotations

import argparse

from tasks.grid.cli import main as task_main
from tasks.voc import FRAMEWORKS


def main(argv=None) -> int:
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--framework", choices=FRAMEWORKS, default="suite")
    known, rest = pre.parse_known_args(argv)
    if known.framework == "mmdet":  # its extra is checked once its arguments parse (its COMMAND's before_driver)
        return task_main("coco", rest)
    return task_main("voc", rest)
