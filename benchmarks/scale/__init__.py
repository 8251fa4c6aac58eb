"""Time and memory at the paper's ImageNet sizes, projected from probes; the prepared GPU check."""
