"""The detection task's profiles, shared by its two drivers (the suite's SSD, mmdet's detectors): the same
budget for every method and every detector."""

from dataclasses import replace

from fcpts.methods import get_method, list_methods
from tasks.grid.profiles import Profile, cpu_profile, paper_profile, profile_table, quick_profile
from tasks.voc.ssd import RECONSTRUCTIONS

PROFILES = profile_table(
    paper_profile("trainval"),
    cpu_profile("cpu", 1024, iterations=400, batch_size=32, pot_iterations=1000).with_note(
        "CPU budget: 1,024 trainval images, 400 iterations of 32 for the training-loop methods, "
        "POT 1,000 iterations per layer on the same images; not the paper's protocol"
    ),
    quick_profile(8, iterations=2, batch_size=4, eval_limit=8, pot_iterations=2),
)


def distill_profile(profile: Profile, blocks: list[str], reconstruction: str) -> Profile:
    """The profile the distilling methods run with on one detector: block MSE over its `blocks`; a non-default
    reconstruction renames the profile, so its records never pass for the default's."""
    default = reconstruction == "mse-blocks" or profile.name.endswith(f"-{reconstruction}")
    methods = dict(profile.methods)
    for m in list_methods(trains=True):
        if "block_names" in get_method(m).options.field_names():  # the methods that distill block outputs
            methods[m] = {"options": {"reconstruction": "mse-blocks", "block_names": blocks}}
    return replace(
        profile,
        name=profile.name + ("" if default else f"-{reconstruction}"),
        methods=methods,
        note=f"{profile.note}; reconstruction {reconstruction}: {RECONSTRUCTIONS[reconstruction]}",
    )
