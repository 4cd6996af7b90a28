"""The masks of the tests that compare attention paths: a batch's lengths as a [batch, n] mask,
and the dense [batch, 1, n_q, n_k] mask that the quadratic definitions take for query and key
masks and a causal rule (the last query sees the last key)."""
import jax.numpy as jnp


def lengths_mask(lengths, n):
  return jnp.arange(n)[None, :] < jnp.asarray(lengths)[:, None]


def dense_mask(batch, n_q, n_k, query_mask=None, key_mask=None, causal=False):
  m = jnp.ones((batch, 1, n_q, n_k), bool)
  if query_mask is not None:
    m = m & query_mask[:, None, :, None]
  if key_mask is not None:
    m = m & key_mask[:, None, None, :]
  if causal:
    m = m & (jnp.arange(n_q)[:, None] + n_k - n_q >= jnp.arange(n_k)[None, :])
  return m
