"""Learned placers on PyTorch: Placeto (an iterative policy over a graph embedding) and GDP (one shot).

    placeto_net   Placeto's graph embedding, pooling and device scorer
    placeto       its MDP rollouts and REINFORCE with the time-step baseline
    gdp           GraphSAGE + attention placer, batch PPO
    train         the training loop over many graphs, and its reward curve
    policy_io     networks to placement-policy/1 files and back
    optimizers    ``placeto`` and ``gdp`` as ask/tell optimizers (zero-shot, then fine-tuning)
    runs          a training recorded in the run store

Importing this package imports torch and registers the two optimizers
(``placement_core.optimize.LEARNED``); the CLI and the dashboard import it only
when a learned placer is used.
"""

from .. import require_torch

require_torch()

from . import optimizers  # noqa: E402,F401  (registers placeto and gdp)
from .optimizers import place  # noqa: E402
from .policy_io import LoadedPolicy, load_policy, save_policy  # noqa: E402
from .train import TrainProgress, TrainResult, TrainSettings, train  # noqa: E402

__all__ = ["LoadedPolicy", "TrainProgress", "TrainResult", "TrainSettings", "load_policy", "place", "save_policy",
           "train"]
