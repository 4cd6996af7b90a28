"""The one training state of every loop in the project: flax's ``TrainState`` plus the PRNG key
that each step's randomness is folded from, and a flag that a non-finite loss was seen (a grid
keeps training its other models, and scores a diverged one as failed)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax.training import train_state

Array = jax.Array

# A model's independent key streams (``TrainState.step_key``), the one numbering of every loop:
# training batches (and, where they are drawn together, dropout), and evaluation batches.
TRAIN_STREAM, EVAL_STREAM = 0, 1
# Dropout's own stream, where a loop draws it apart from its training batches and evaluates on
# fixed data (the causal-LM analysis): it never meets ``EVAL_STREAM`` in one program.
DROPOUT_STREAM = 1


class TrainState(train_state.TrainState):
  """``step``, ``params``, ``opt_state`` (``tx`` and ``apply_fn`` are static), ``key`` and
  ``diverged``.

  ``key`` is raw ``uint32`` key data (``jax.random.key_data``), so the state is a tree of plain
  arrays that orbax saves and ``vmap`` maps like any other leaf.
  """
  key: Array
  diverged: Array

  @classmethod
  def create(cls, *, apply_fn, params, tx: optax.GradientTransformation, key: Array,
             **kwargs) -> "TrainState":
    """A fresh state at step 0.

    Args:
      apply_fn: the model's ``apply`` (static, not saved).
      params: the initial parameters.
      tx: the optimiser; its ``init`` builds ``opt_state``.
      key: a typed PRNG key or raw key data.
      **kwargs: further fields of a subclass.

    Returns:
      The state, with ``step`` an int32 0 and ``diverged`` False.
    """
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
      key = jax.random.key_data(key)
    return cls(step=jnp.zeros((), jnp.int32), apply_fn=apply_fn, params=params, tx=tx,
               opt_state=tx.init(params), key=key, diverged=jnp.zeros((), bool), **kwargs)

  def step_key(self, stream: int = 0) -> Array:
    """The key of this step in one of the model's independent streams (``TRAIN_STREAM``,
    ``EVAL_STREAM``, ``DROPOUT_STREAM``), the same on every resume:
    ``fold_in(fold_in(key, stream), step)``."""
    base = jax.random.fold_in(jax.random.wrap_key_data(self.key), stream)
    return jax.random.fold_in(base, self.step)

  def apply_gradients(self, *, grads, loss: Array | None = None, **kwargs) -> "TrainState":
    """One optimiser update; ``loss``, when given, sets ``diverged`` once it is not finite.

    Args:
      grads: gradients shaped as ``params``.
      loss: the step's loss (optional).
      **kwargs: other fields to replace.

    Returns:
      The next state (``step`` + 1).
    """
    state = super().apply_gradients(grads=grads, **kwargs)
    if loss is None:
      return state
    return state.replace(diverged=self.diverged | ~jnp.isfinite(loss))
