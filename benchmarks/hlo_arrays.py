"""How many N x N arrays XLA writes in a grid's training program, per arch and attention path:
where NAP's and NON's attention kernels (``kernels.nap``) can save bytes: none at the grids'
shapes, where "auto" takes their linear paths; the quadratic path's arrays below two head widths.

For each arch and ``model.attention_implementation``, one sweep grid's chunk program (training
steps and evaluation; 1 layer, 4 heads, batch 4) is compiled on this machine and its optimised
HLO read: the instructions outside fused computations whose result ends in ``[heads, N, N]``
(each a buffer written to memory; inside a fusion an array stays in registers). N is kept
distinct from d so that no weight shape is mistaken for one. One line per program:

  arch=nap attention_implementation=auto n=24 d=32 nxn_arrays=0

  python benchmarks/hlo_arrays.py [--archs nap,non] [--implementations auto,quadratic]
      [--seq_len 24] [--d_model 32]
"""
from __future__ import annotations

import re

import jax
import jax.numpy as jnp
from absl import app, flags

from normattn_jax.cli import exports
from normattn_jax.sweep import config as config_lib
from normattn_jax.sweep.programs import HYPERPARAMETERS, Setup, build_grid

HEADS = 4
_ARCHS = flags.DEFINE_list("archs", ["nap", "non"], "Architectures.")
_IMPLEMENTATIONS = flags.DEFINE_list("implementations", ["auto", "quadratic"],
                                     "model.attention_implementation values.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 24, "N (keep it unlike d_model).", lower_bound=2)
_D_MODEL = flags.DEFINE_integer("d_model", 32, "d.", lower_bound=HEADS)


def nxn_arrays(hlo_text: str, n: int) -> int:
  """The instructions outside fused computations whose result ends in ``[HEADS, n, n]``."""
  names, in_fusion = set(), False
  for line in hlo_text.splitlines():
    if line and not line[0].isspace():  # a computation's header (or its closing brace)
      in_fusion = "fus" in line.split(" ")[0] or line.startswith("%fused")
      continue
    match = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = \w+\[([0-9,]*)\]", line)
    if not in_fusion and match and match.group(2).endswith(f"{HEADS},{n},{n}"):
      names.add(match.group(1))
  return len(names)


def chunk_hlo(arch: str, implementation: str, n: int, d: int) -> str:
  c = exports.grid_config(arch, None, implementation, "float32")
  c.task.seq_len, c.model.d_model, c.model.num_heads = n, d, HEADS
  config_lib.validate(c)
  grid = build_grid(Setup(arch, c), 1, ahead=False)
  keys = jax.ShapeDtypeStruct((grid.padded, 2), jnp.uint32)
  hp = {name: jax.ShapeDtypeStruct((grid.padded,), jnp.float32) for name in HYPERPARAMETERS}
  state = jax.eval_shape(grid.init, keys, hp, *grid.shared)
  return grid.chunk_program.lower(state, hp, *grid.shared).compile().as_text()


def main(argv):
  del argv
  n, d = _SEQ_LEN.value, _D_MODEL.value
  if n == d:
    raise app.UsageError(f"--seq_len={n} equals --d_model: a d x d weight would count as N x N")
  for arch in _ARCHS.value:
    for implementation in _IMPLEMENTATIONS.value:
      count = nxn_arrays(chunk_hlo(arch, implementation, n, d), n)
      print(f"arch={arch} attention_implementation={implementation} n={n} d={d} "
            f"nxn_arrays={count}", flush=True)


if __name__ == "__main__":
  app.run(main)
