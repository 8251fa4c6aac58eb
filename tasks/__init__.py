"""The suite's tasks (`python -m tasks.<name>`).

OpenMP threads that wait at a barrier spin by default, taking CPU from the threads with work whenever another
process is busy on the machine: a CPU training step then slows several times more than under
OMP_WAIT_POLICY=PASSIVE, where waiting threads sleep (benchmarks/speed/thread_policy.py). The policy is read when
torch starts, so it is set here, before any task imports torch, unless the user set one.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
