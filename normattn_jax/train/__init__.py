"""The engine: many models trained as one compiled program (``grid``), the one driver of every
kind of run (``runs.run``) with its hooks (``driver``), the kinds' registry (``kinds``),
checkpoints and workdirs (``checkpoint``), the run log, multi-host helpers, the training state
and the optax chains. It knows no task, model, kind of run, analysis or figure: each kind of run
is a package above it (``normattn_jax.sweep``, ``pretrain``, ``finetune``, ``analysis``,
``card``) that registers itself here.

It needs the ``[experiments]`` extra; checked here, before any submodule imports it."""
from normattn_jax import _moved
from normattn_jax._extras import require

require("ml_collections", "experiments")
require("orbax.checkpoint", "experiments")
from normattn_jax.train.driver import Budget, Interrupted, RunHooks
from normattn_jax.train.grid import Grid, GridRun, run_grid
from normattn_jax.train.kinds import RunKind, register
from normattn_jax.train.optim import make_optimizer, with_learning_rate
from normattn_jax.train.run_log import RunLog
from normattn_jax.train.runs import RunContext, run
from normattn_jax.train.state import TrainState

__all__ = ["Budget", "Grid", "GridRun", "Interrupted", "RunContext", "RunHooks", "RunKind",
           "RunLog", "TrainState", "make_optimizer", "register", "run", "run_grid",
           "with_learning_rate"]


def __getattr__(name: str):
  """The previous release's names of this package (``normattn_jax._moved``)."""
  return _moved.moved_attribute(__name__, name)
