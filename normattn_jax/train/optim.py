"""optax chains for the grid engine: the learning rate is data, not a constant.

``make_optimizer`` builds ``[per-tensor clip] -> scale_by_adam -> schedule with peak 1 ->
scale(-lr)``; ``lr`` lives in the optimiser state (``inject_hyperparams``), so one compiled
program trains every learning rate of a grid (DESIGN principle 3).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

# The NAP paper's code uses Keras' Adam: beta_1 0.9, beta_2 0.999, epsilon 1e-7.
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-7


def clip_by_tensor_norm(max_norm: float) -> optax.GradientTransformation:
  """Rescale each gradient tensor to norm <= ``max_norm`` on its own (Keras' ``clipnorm``)."""
  def update(updates, state, params=None):
    del params
    def clip(g):
      norm = jnp.sqrt(jnp.sum(jnp.square(g)))
      return g * jnp.minimum(1.0, max_norm / jnp.maximum(norm, 1e-30))
    return jax.tree.map(clip, updates), state
  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def schedule_shape(num_steps: int, warmup_steps: int = 0) -> optax.Schedule:
  """Peak-1 schedule: linear warm-up over ``warmup_steps``, then linear decay to 0 at the end."""
  decay = optax.linear_schedule(1.0, 0.0, max(num_steps - warmup_steps, 1))
  if warmup_steps <= 0:
    return decay
  warmup = optax.linear_schedule(0.0, 1.0, warmup_steps)
  return optax.join_schedules([warmup, decay], [warmup_steps])


def make_optimizer(learning_rate, num_steps: int, warmup_steps: int = 0,
                   clip_norm: float | None = None) -> optax.GradientTransformation:
  """Adam with linear decay (and optional warm-up and per-tensor clipping); ``learning_rate``
  may be a traced per-model scalar: it is stored in the state, not baked into the graph."""
  parts = [] if clip_norm is None else [clip_by_tensor_norm(clip_norm)]
  parts += [
      optax.scale_by_adam(b1=ADAM_B1, b2=ADAM_B2, eps=ADAM_EPS),
      optax.scale_by_schedule(schedule_shape(num_steps, warmup_steps)),
      optax.inject_hyperparams(optax.scale)(step_size=-jnp.asarray(learning_rate, jnp.float32)),
  ]
  return optax.chain(*parts)
