"""Hand-made records for the reporting tests: the fields tables and figures read, nothing run."""


def cifar_record(method, sp=0.9, top1=90.0, profile="paper-cpu", model="resnet32", wall_s=600.0):
    """A CIFAR-10 record of `method` at sparsity `sp`, dense 92.6 top-1."""
    return {
        "task": "cifar",
        "dataset": "cifar10",
        "model": model,
        "method": method,
        "target_sparsity": sp,
        "achieved_sparsity": sp,
        "metrics": {"top1": top1, "top5": 99.0},
        "dense_metrics": {"top1": 92.6, "top5": 99.8},
        "profile": {"name": profile},
        "wall_s": wall_s,
        "device": "cpu: test",
        "_path": f"cifar/cifar10/{model}/{method}-sp{int(sp * 100)}-{profile}-seed0.json",
    }
