"""optax chains for the grid engine: the learning rate is data, not a constant.

``make_optimizer`` builds ``[per-tensor clip] -> scale_by_adam -> schedule with peak 1 ->
scale(-lr)`` once per program; ``lr`` lives in the optimiser state (``inject_hyperparams``), set
per model by ``with_learning_rate``, so one compiled program trains every learning rate of a
grid. With ``flat`` the part after the clipping runs on one flat vector of every parameter
(``optax.flatten``): Adam's moments are one buffer each, updated by a few kernels rather than a
few per parameter tensor, the same elementwise arithmetic.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

# The NAP paper's code uses Keras' Adam: beta_1 0.9, beta_2 0.999, epsilon 1e-7.
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-7
# The injected hyper-parameter that holds the learning rate, negated (a descent step).
STEP_SIZE = "step_size"
_INJECTED = (optax.InjectHyperparamsState, optax.InjectStatefulHyperparamsState)


def clip_by_tensor_norm(max_norm: float) -> optax.GradientTransformation:
  """Rescale each gradient tensor to norm <= ``max_norm`` on its own (Keras' ``clipnorm``).

  Args:
    max_norm: each tensor's largest L2 norm after clipping.

  Returns:
    A stateless optax transformation.
  """
  def update(updates, state, params=None):
    del params
    def clip(g):
      norm = jnp.sqrt(jnp.sum(jnp.square(g)))
      return g * jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-30))
    return jax.tree.map(clip, updates), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def schedule_shape(num_steps: int, warmup_steps: int = 0) -> optax.Schedule:
  """Peak-1 schedule: linear decay to 0 at the end, replaced by a linear warm-up over
  ``warmup_steps`` (the BERT code's shape, which the NAP code copies for BERT: the decay has
  already begun when the warm-up ends).

  Args:
    num_steps: the decay reaches 0 here.
    warmup_steps: linear warm-up steps (0: none).

  Returns:
    ``step -> multiplier`` (float32), at most 1.
  """
  return albert_schedule(1.0, num_steps, warmup_steps)


def make_optimizer(num_steps: int, warmup_steps: int = 0, clip_norm: float | None = None,
                   flat: bool = False) -> optax.GradientTransformation:
  """Keras' Adam with linear decay (and optional warm-up and per-tensor clipping), its learning
  rate a value of the state rather than of the graph.

  Args:
    num_steps: the decay reaches 0 here.
    warmup_steps: linear warm-up steps (0: none).
    clip_norm: each gradient tensor's largest norm (None: no clipping).
    flat: Adam, the schedule and the step on one flat vector of every parameter (its moments
      one buffer each, ``optax.flatten``); the clipping stays per tensor. Its state is another
      tree than the per-tensor one's, so a checkpoint restores only into the layout it was
      saved from.

  Returns:
    The optimiser; its ``init`` sets the learning rate 1, ``with_learning_rate`` another.
  """
  parts = [
      optax.scale_by_adam(b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS),
      optax.scale_by_schedule(schedule_shape(num_steps, warmup_steps)),
      optax.inject_hyperparams(optax.scale)(**{STEP_SIZE: -1.0}),
  ]
  if flat:
    parts = [optax.flatten(optax.chain(*parts))]
  clip = [] if clip_norm is None else [clip_by_tensor_norm(clip_norm)]
  return optax.chain(*clip, *parts)


def _map_injected(opt_state, fn):
  """``opt_state`` with ``fn`` applied to each ``inject_hyperparams`` state in it."""
  if isinstance(opt_state, _INJECTED):
    return fn(opt_state)
  if isinstance(opt_state, tuple) and not hasattr(opt_state, "_fields"):
    return tuple(_map_injected(part, fn) for part in opt_state)
  return opt_state


def with_learning_rate(opt_state, learning_rate) -> optax.OptState:
  """The state of ``make_optimizer`` with another learning rate.

  Args:
    opt_state: ``make_optimizer(...).init(params)`` (or a later state).
    learning_rate: a float or a traced float32 scalar (one per model under ``vmap``).

  Returns:
    The same state, its learning rate replaced.
  """
  step_size = -jnp.asarray(learning_rate, jnp.float32)
  return _map_injected(opt_state, lambda s: s._replace(
      hyperparams={**s.hyperparams, STEP_SIZE: step_size}))


def learning_rate_of(opt_state) -> jax.Array:
  """The learning rate held by a state of ``make_optimizer``.

  Args:
    opt_state: a state of ``make_optimizer`` (one model's, or a vmapped one).

  Returns:
    The learning rate (``[models]`` for a vmapped state).

  Raises:
    ValueError: if the state does not hold exactly one injected learning rate.
  """
  found = []
  _map_injected(opt_state, lambda s: found.append(-s.hyperparams[STEP_SIZE]) or s)
  if len(found) != 1:
    raise ValueError(f"expected one injected learning rate in the state, found {len(found)}")
  return found[0]


# ----- ALBERT's LAMB (google-research/albert: optimization.py, lamb_optimizer.py) -----

def albert_schedule(peak: float, num_steps: int, warmup_steps: int) -> optax.Schedule:
  """ALBERT's learning rate: ``peak * (1 - step / num_steps)`` (polynomial decay, power 1,
  to 0), replaced by ``peak * step / warmup_steps`` during the warm-up (so the decay has
  already begun when the warm-up ends, as in ALBERT).

  Args:
    peak: the learning rate at the end of the warm-up (before the decay).
    num_steps: the decay reaches 0 here (and stays there).
    warmup_steps: linear warm-up steps (<= 0: none).

  Returns:
    ``step -> learning rate`` (float32).
  """
  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    decayed = peak * (1.0 - jnp.minimum(step, num_steps) / num_steps)
    if warmup_steps <= 0:
      return decayed
    return jnp.where(step < warmup_steps, peak * step / warmup_steps, decayed)
  return schedule


def scale_by_adam_without_bias_correction(b1: float = 0.9, b2: float = 0.999,
                                          eps: float = 1e-6) -> optax.GradientTransformation:
  """``m / (sqrt(v) + eps)`` with ALBERT's raw moments: its LAMB never bias-corrects them
  (optax's ``scale_by_adam`` and ``lamb`` do).

  Args:
    b1: the decay rate of the first moment.
    b2: the decay rate of the second moment.
    eps: added to ``sqrt(v)``.

  Returns:
    An optax transformation whose state is an ``optax.ScaleByAdamState``.
  """
  def init(params):
    zeros = lambda: jax.tree.map(jnp.zeros_like, params)
    return optax.ScaleByAdamState(count=jnp.zeros([], jnp.int32), mu=zeros(), nu=zeros())

  def update(updates, state, params=None):
    del params
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)
    updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
    return updates, optax.ScaleByAdamState(count=state.count + 1, mu=mu, nu=nu)
  return optax.GradientTransformation(init, update)


def lamb_adapted(params) -> dict:
  """Which parameters take weight decay and the trust ratio: ALBERT excludes every name that
  matches "LayerNorm", "layer_norm" or "bias"; here every parameter of a LayerNorm module (a
  name ending in "norm"), every bias, and HNAS's hybrid weights (a mixing coefficient in [0, 1]
  that decay would pull towards softmax).

  Args:
    params: a flax params tree.

  Returns:
    A tree of ``params``' structure with a bool per leaf: True where decay and trust ratio apply.
  """
  def adapted(path, _):
    names = [str(getattr(key, "key", key)) for key in path]
    return not (any(name.endswith("norm") for name in names[:-1]) or "bias" in names[-1]
                or names[-1].startswith("hybrid_weight"))
  return jax.tree_util.tree_map_with_path(adapted, params)


def albert_lamb(learning_rate: float, num_steps: int, warmup_steps: int,
                weight_decay: float = 0.01, clip_norm: float = 1.0, b1: float = 0.9,
                b2: float = 0.999, eps: float = 1e-6) -> optax.GradientTransformation:
  """ALBERT's optimiser: global-norm clipping, Adam moments without bias correction, decoupled
  weight decay and the layer-wise trust ratio ``|w| / |update|`` (1 where either norm is 0),
  both skipped for LayerNorm parameters, biases and hybrid weights (``lamb_adapted``), then
  ``albert_schedule``.

  Args:
    learning_rate: the peak learning rate.
    num_steps: the learning rate decays to 0 here.
    warmup_steps: linear warm-up steps (<= 0: none).
    weight_decay: the decoupled weight decay rate.
    clip_norm: the largest global gradient norm.
    b1: Adam's first-moment decay rate.
    b2: Adam's second-moment decay rate.
    eps: Adam's epsilon, added to ``sqrt(v)``.

  Returns:
    The optax transformation.
  """
  return optax.chain(
      optax.clip_by_global_norm(clip_norm),
      scale_by_adam_without_bias_correction(b1, b2, eps),
      optax.add_decayed_weights(weight_decay, lamb_adapted),
      optax.masked(optax.scale_by_trust_ratio(), lamb_adapted),
      optax.scale_by_learning_rate(albert_schedule(learning_rate, num_steps, warmup_steps)),
  )
