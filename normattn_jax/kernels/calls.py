"""What every Pallas kernel of the package calls: ``pallas_call`` with its platform's compiler
parameters and its outputs typed for ``shard_map``, and padding to the blocks' sizes."""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

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


def _varying_like(arrays):
  """The mesh axes over which any of ``arrays`` varies (inside ``shard_map``), as the type a
  kernel's outputs declare; None outside one."""
  types = [getattr(jax.typeof(a), "mat", None) for a in arrays]
  types = [t for t in types if t is not None]
  if not types:
    return None
  return type(types[0])(varying=frozenset().union(*(t.varying for t in types)))


def pallas(kernel, grid: tuple, in_specs, out_specs, out_shapes, *, platform: str,
           interpret: bool, num_warps: int = 4):
  """``pallas_call`` of ``kernel`` over the parallel axes of ``grid``, as a function of the
  inputs; ``out_shapes`` as ``(shape, dtype)`` pairs, declared varying as the inputs vary (one
  output returned alone)."""
  def call(*args):
    mat = _varying_like(args)
    shapes = [jax.ShapeDtypeStruct(shape, dtype, manual_axis_type=mat)
              for shape, dtype in out_shapes]
    single = len(shapes) == 1
    return pl.pallas_call(kernel, grid=grid, in_specs=in_specs,
                          out_specs=out_specs[0] if single else out_specs,
                          out_shape=shapes[0] if single else shapes, interpret=interpret,
                          compiler_params=compiler_params(platform, interpret,
                                                          num_warps=num_warps,
                                                          dimensions=len(grid)))(*args)
  return call


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
