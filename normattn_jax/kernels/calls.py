"""What every Pallas kernel of the package calls: its platform's compiler parameters, the
type of its outputs inside ``shard_map``, and padding to the blocks' sizes."""
from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def compiler_params(platform: str, interpret: bool, *, num_warps: int = 4,
                    dimensions: int = 1):
  """The platform's compiler parameters for a grid of ``dimensions`` parallel axes (None when
  interpreted)."""
  if interpret:
    return None
  if platform == "tpu":
    from jax.experimental.pallas import tpu as pltpu
    return pltpu.CompilerParams(dimension_semantics=("parallel",) * dimensions)
  from jax.experimental.pallas import triton as pltriton
  return pltriton.CompilerParams(num_warps=num_warps, num_stages=1)


def varying_like(arrays):
  """The mesh axes over which any of ``arrays`` varies (inside ``shard_map``), as the type a
  kernel's outputs declare; None outside one."""
  types = [getattr(jax.typeof(a), "mat", None) for a in arrays]
  types = [t for t in types if t is not None]
  if not types:
    return None
  return type(types[0])(varying=frozenset().union(*(t.varying for t in types)))


def next_power_of_two(n: int) -> int:
  return 1 << max(n - 1, 0).bit_length()


def round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def pad_to(x: Array, shape) -> Array:
  """``x`` padded with zeros at the end of each axis to ``shape`` (-1: the axis as it is)."""
  shape = tuple(n if s == -1 else s for n, s in zip(x.shape, shape))
  if x.shape == shape:
    return x
  return jnp.pad(x, [(0, s - n) for n, s in zip(x.shape, shape)])
