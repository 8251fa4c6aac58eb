"""The detection task's profiles, shared by its two drivers (the suite's SSD, mmdet's detectors): the same
budget for every method and every detector."""

from tasks.grid.profiles import Profile, paper_profile, pot_budget

PAPER_METHODS = ["pot-l2norm", "pot-erk", "fcpts"]
PAPER_SPARSITY = 0.9
DISTILL_METHODS = ("fcpts", "fcpts-fixed")  # they take block_names

PROFILES = {
    "paper": paper_profile(
        "METHOD.md protocol (GPU): FCPTS 1,024 trainval images x 1,600 iterations of 64; "
        "POT 10,240 images (capped at trainval), up to 20,000 iterations per layer"
    ),
    "cpu": Profile(
        "cpu",
        n_calibration=1024,
        iterations=400,
        batch_size=32,
        note="CPU budget: 1,024 trainval images, 400 iterations of 32 for the training-loop methods, "
        "POT 1,000 iterations per layer on the same images; not the paper's protocol",
        methods=pot_budget(1024, 1000),
    ),
    "quick": Profile(
        "quick",
        n_calibration=8,
        iterations=2,
        batch_size=4,
        eval_limit=8,
        note="smoke test only; not a result",
        methods=pot_budget(8, 2),
    ),
}
