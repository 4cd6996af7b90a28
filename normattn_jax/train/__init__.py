"""Many-model training: configs, optax chains, the vmapped grid engine, checkpoints, sweeps.

It needs the ``[experiments]`` extra; checked here, before any submodule imports it."""
from normattn_jax._extras import require

require("ml_collections", "experiments")
require("orbax.checkpoint", "experiments")
from normattn_jax.train.config import base_config, validate
from normattn_jax.train.grid import (Grid, GridRun, Programs, Setup, make_programs, run_grid,
                                     train_grid)
from normattn_jax.train.optim import make_optimizer, with_learning_rate
from normattn_jax.train.run_log import RunLog
from normattn_jax.train.state import TrainState
from normattn_jax.train.sweep import run_sweep

__all__ = ["Grid", "GridRun", "Programs", "RunLog", "Setup", "TrainState", "base_config",
           "make_optimizer", "make_programs", "run_grid", "run_sweep", "train_grid", "validate",
           "with_learning_rate"]
