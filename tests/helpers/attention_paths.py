"""What the tests that compare attention paths share: a batch's lengths as a [batch, n] mask,
the dense [batch, 1, n_q, n_k] mask that the quadratic definitions take for query and key masks
and a causal rule (the last query sees the last key), and a path's values with its gradients.
The masks are made in one program each (op by op, each of their operations would compile alone)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np


@functools.partial(jax.jit, static_argnames="n")
def lengths_mask(lengths, n):
  return jnp.arange(n)[None, :] < jnp.asarray(lengths)[:, None]


@functools.partial(jax.jit, static_argnames=("batch", "n_q", "n_k", "causal"))
def dense_mask(batch, n_q, n_k, query_mask=None, key_mask=None, causal=False):
  m = jnp.ones((batch, 1, n_q, n_k), bool)
  if query_mask is not None:
    m = m & query_mask[:, None, :, None]
  if key_mask is not None:
    m = m & key_mask[:, None, None, :]
  if causal:
    m = m & (jnp.arange(n_q)[:, None] + n_k - n_q >= jnp.arange(n_k)[None, :])
  return m


def out_and_grads(fn, *args, probe_seed=1, jit=jax.jit):
  """``fn(*args)`` and the gradients of ``<fn(*args), probe>`` with respect to every argument,
  as one compiled program (op by op, each of their many operations would compile alone). The
  probe is drawn in float32 whatever the output's dtype, so every path gets the same one."""
  def go(*args):
    out, vjp = jax.vjp(fn, *args)
    return out, vjp(jax.random.normal(jax.random.key(probe_seed), out.shape).astype(out.dtype))
  return jit(go)(*args)


def paths_out_and_grads(fns, *args, jit=jax.jit):
  """``out_and_grads`` of each of ``fns`` on the same arguments, in one program."""
  inline = lambda fn: fn
  return jit(lambda *a: [out_and_grads(fn, *a, jit=inline) for fn in fns])(*args)


def largest(x, floor: float = 0.0) -> float:
  """The largest magnitude of ``x``, at least ``floor`` (in numpy: no program per shape)."""
  return max(float(np.max(np.abs(np.asarray(x, np.float32)))), floor)
