"""Many-model training: configs, optax chains, the vmapped grid engine, checkpoints, sweeps."""
from normattn_jax.train.config import base_config, validate
from normattn_jax.train.grid import Grid, Programs, Setup, TrainState, make_programs
from normattn_jax.train.optim import make_optimizer
from normattn_jax.train.sweep import run_sweep

__all__ = ["Grid", "Programs", "Setup", "TrainState", "base_config", "make_optimizer", "make_programs",
           "run_sweep", "validate"]
