"""The sweep kind of run: a grid of architectures x learning rates x a swept hyper-parameter x
seeds on a synthetic task, trained on the engine (``normattn_jax.train``) and scored as the NAP
paper's pixel plots: its config (``config``), plan (``plan``, ``layout``), programs
(``programs``), training and resume (``train``), scoring and stored results (``scoring``,
``artifacts``), one arch trained again (``retrain``) and per-seed results beside the NAP authors'
(``seeds``). Importing it registers the kind (``"sweep"``).

It needs the ``[experiments]`` extra; checked here, before any submodule imports it.
"""
from normattn_jax._extras import require

require("ml_collections", "experiments")
from normattn_jax.sweep.config import base_config, validate
from normattn_jax.sweep.plan import SweepPlan
from normattn_jax.sweep.programs import Setup, make_programs, train_grid
from normattn_jax.sweep.train import SWEEP, load_model, load_models, resummarise, run_sweep

__all__ = ["SWEEP", "Setup", "SweepPlan", "base_config", "load_model", "load_models",
           "make_programs", "resummarise", "run_sweep", "train_grid", "validate"]
