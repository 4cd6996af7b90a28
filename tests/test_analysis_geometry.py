"""Sinkhorn residuals and the sequence-length dependence of pooled outputs."""
import functools

import jax
import numpy as np

from normattn_jax.analysis import geometry
from normattn_jax.analysis.geometry import scaling_exponent, sinkhorn_residuals
from normattn_jax.attention import dnas_weights

# Deterministic (seed 0): the lengths both tests read are computed once (op by op, each op at
# each length compiles).
pooled_output_scale = functools.lru_cache(maxsize=None)(geometry.pooled_output_scale)
LENGTHS = (1, 4, 16, 64, 256)
# The Sinkhorn logits of both tests are 8 x 8, the figure's: op by op, each size compiles anew.
SIZE = 8


def test_sinkhorn_residuals_shrink_and_start_at_dnas():
  logits = 2.0 * jax.random.normal(jax.random.key(0), (SIZE, SIZE))
  res = sinkhorn_residuals(logits, 20)
  assert max(res["row"]) < 1e-5  # every iteration ends with a row normalisation
  assert res["column"][-1] < 1e-3 * res["column"][0]
  dnas = np.asarray(jax.jit(dnas_weights)(logits))
  np.testing.assert_allclose(res["column"][0], float(np.max(np.abs(dnas.sum(0) - 1))), rtol=1e-5)


def test_softmax_attention_shrinks_like_mean_pooling():
  lengths = list(LENGTHS)
  stats = [pooled_output_scale(n, head_dim=32, total=2048) for n in lengths]
  slope = {m: scaling_exponent(lengths, [s[m]["std"] for s in stats])
           for m in ("softmax attention", "mean", "sum", "normalised sum")}
  assert abs(slope["mean"] + 0.5) < 0.05 and abs(slope["sum"] - 0.5) < 0.05
  assert abs(slope["normalised sum"]) < 0.05
  assert -0.6 < slope["softmax attention"] < -0.3  # like mean, not like sum


def test_the_figures_runs_are_the_residuals_and_slopes_per_setting():
  residuals = geometry.sinkhorn_by_logit_scale(scales=(1.0, 3.0), size=SIZE, max_iters=3)
  assert list(residuals) == ["logit_std=1", "logit_std=3"]
  logits = jax.random.normal(jax.random.key(0), (SIZE, SIZE))
  assert residuals["logit_std=3"] == sinkhorn_residuals(3.0 * logits, 3)
  scales = {n: pooled_output_scale(n, head_dim=32, total=2048) for n in LENGTHS}
  slopes = geometry.pooling_exponents(scales)  # the two shortest lengths left out
  assert list(slopes)[:2] == ["softmax attention std", "softmax attention norm"]
  assert slopes["mean std"] == scaling_exponent(LENGTHS[2:],
                                                [scales[n]["mean"]["std"] for n in LENGTHS[2:]])
