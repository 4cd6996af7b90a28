"""Runs in a process of 8 host devices (tests/test_mesh.py): a grid of 3 models on a (models x
data) mesh of 2 x 4 and a pre-training with its parameters sharded over the 8, writing their
numbers, their arrays' shardings and the refusals of meshes that do not divide to ``out``.

  python tests/mesh_worker.py <out folder>
"""
import json
import os
import sys

import jax
import numpy as np

from normattn_jax.sweep.programs import train_grid
from helpers.mesh import GRID_SHARDS, first_step, flat, grid_config, pretraining_steps


def main(out: str) -> None:
  assert jax.device_count() == 8, jax.devices()
  layout = {}

  def record(done, state, metrics):
    leaf = jax.tree.leaves(state.params)[0]
    layout["grid"] = {"spec": str(leaf.sharding.spec), "mesh": dict(leaf.sharding.mesh.shape)}

  run = train_grid(grid_config(GRID_SHARDS), "mte", on_chunk=record)
  np.savez(os.path.join(out, "grid.npz"), params=flat(run.state.params), **run.metrics)
  layout["asked"] = layout["grid"]
  np.savez(os.path.join(out, "first_step.npz"), **first_step(GRID_SHARDS))
  losses, state = pretraining_steps(shard_parameters=True)
  layout["pretraining"] = [[list(x.shape), str(x.sharding.spec)]
                           for x in jax.tree.leaves((state.params, state.opt_state))]
  layout["pretraining_losses"] = losses
  np.save(os.path.join(out, "pretraining.npy"), flat(state.params))
  auto = train_grid(grid_config(0, num_steps=3), "mte", on_chunk=record)
  layout["auto"] = layout["grid"]
  del auto
  refusals = []
  for shards, batch in ((3, 8), (8, 4)):
    try:
      train_grid(grid_config(shards, batch_size=batch), "mte")
    except ValueError as err:
      refusals.append(str(err))
  layout["refusals"] = refusals
  with open(os.path.join(out, "layout.json"), "w") as f:
    json.dump(layout, f)


if __name__ == "__main__":
  main(sys.argv[1])
