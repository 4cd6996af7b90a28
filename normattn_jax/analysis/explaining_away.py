"""Explaining away (Ding et al., Definition 1, Fig. 1): a lower-layer position j is
epsilon-explained-away when its total attention weight over all queries, sum_i pi_ij, falls below
epsilon. UNAS allows it; DNAS keeps every sum >= 1/S (Theorem 2).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

EPSILON = 1e-8


def attention_weights(model, params, tokens) -> list[jax.Array]:
  """The attention weights ``[batch, heads, q, k]`` of every layer of a ``SequenceModel``.

  Args:
    model: a ``SequenceModel`` with attention layers.
    params: its variables (``{"params": ...}``).
    tokens: int tokens ``[batch, N]``.

  Returns:
    One array ``[batch, heads, N, N]`` per layer, in layer order.
  """
  _, state = model.apply(params, tokens, sow_weights=True, mutable=["intermediates"])
  layers = state["intermediates"]
  return [layers[name]["attention"]["attention_weights"][0]
          for name in sorted(layers, key=lambda n: int(n.split("_")[-1]))]


def key_weight_sums(weights: jax.Array) -> np.ndarray:
  """Per key, the weight summed over the queries: ``[..., k]``.

  Args:
    weights: attention weights ``[..., q, k]``.

  Returns:
    float32 numpy ``[..., k]``.
  """
  return np.asarray(jnp.sum(weights.astype(jnp.float32), axis=-2))


def explained_away_fraction(sums: np.ndarray, epsilon: float = EPSILON) -> float:
  """The fraction of keys whose summed weight is below ``epsilon``.

  Args:
    sums: per-key weight sums (``key_weight_sums``), any shape.
    epsilon: the threshold.

  Returns:
    A fraction in [0, 1].
  """
  return float(np.mean(np.asarray(sums) < epsilon))


# Fig. 1's two schemes: their labels and normalisations, and the probe batch of the case task.
SCHEMES = {"UNAS": "softmax", "DNAS": "dnas"}
PROBE_SEED, PROBE_BATCH = 123, 256


def train_case_model(normalization: str, *, steps: int, seq_len: int, d_model: int,
                     learning_rate: float):
  """One MTE model of the case task with ``normalization``, trained by the grid engine.

  Args:
    normalization: a registered normalisation (the config's ``attention.name``).
    steps: training steps (one evaluation, at the end).
    seq_len: the task's sequence length S.
    d_model: the model's width.
    learning_rate: Adam's peak learning rate.

  Returns:
    ``(setup, params, val_acc)``: its ``train.programs.Setup``, trained variables and final
    validation accuracy.
  """
  from normattn_jax.sweep.config import base_config  # the experiments extra
  from normattn_jax.sweep.programs import Setup, train_grid

  c = base_config()
  c.archs, c.attention.name = ("mte",), normalization
  c.learning_rates = (learning_rate,)
  c.num_seeds = 1
  c.task.seq_len, c.model.d_model = seq_len, d_model
  c.train.num_steps, c.train.eval_every = steps, steps
  c.eval.val_batches, c.eval.case_set_size = 4, 100
  run = train_grid(c, c.archs[0])  # one model: one learning rate, one seed
  params = jax.tree.map(lambda a: a[0], run.state.params)
  return Setup(c.archs[0], c), params, float(run.metrics["val_acc"][-1, 0])


def trained_key_sums(normalization: str, *, steps: int, seq_len: int, d_model: int,
                     learning_rate: float) -> tuple[np.ndarray, dict]:
  """Fig. 1 for one scheme: train a case-task model (``train_case_model``) and sum each key's
  weights over the queries on a probe batch, every layer and head (``probe_key_sums``).

  Returns:
    ``(sums, entry)`` as ``probe_key_sums`` gives them.
  """
  return probe_key_sums(*train_case_model(normalization, steps=steps, seq_len=seq_len,
                                          d_model=d_model, learning_rate=learning_rate))


def probe_key_sums(setup, params, val_acc: float) -> tuple[np.ndarray, dict]:
  """Each key's weights summed over the queries on the probe batch, every layer and head.

  Args:
    setup: the model's ``train.programs.Setup`` (its config names the normalisation).
    params: its variables.
    val_acc: its validation accuracy, passed into the entry.

  Returns:
    ``(sums, entry)``: the sums, flat, and ``{"val_acc", "explained_away_fraction",
    "underflowed_keys", "min_log_sum", "log_one_over_S"}``.
  """
  seq_len = setup.config.task.seq_len
  tokens, _ = setup.sample(jax.random.key(PROBE_SEED), PROBE_BATCH, seq_len)
  weights = attention_weights(setup.model(), params, tokens)
  sums = np.concatenate([key_weight_sums(w).ravel() for w in weights])
  return sums, {"val_acc": val_acc,
                "explained_away_fraction": explained_away_fraction(sums),
                # float32 weights can underflow to 0: their log-sum is below this range
                "underflowed_keys": int(np.sum(sums == 0)),
                "min_log_sum": float(np.log(sums[sums > 0].min())),
                "log_one_over_S": float(np.log(1.0 / seq_len))}
