"""A model's variables drawn with numpy: jax's initialisers compile longer than the tiny models
of the tests run."""
import jax
import numpy as np


def random_params(model, seed, *inputs):
  """Variables of the model's structure (``model.init(key, *inputs)``'s, traced only) drawn at
  random, N(0, 0.3^2) around 1 for a scale and around 0 for the others, so that no term hides
  behind an initial value."""
  shapes = jax.eval_shape(lambda: model.init(jax.random.key(0), *inputs))
  rng = np.random.default_rng(seed)
  return jax.tree_util.tree_map_with_path(
      lambda path, s: (path[-1].key == "scale") + 0.3 * rng.standard_normal(s.shape, np.float32),
      shapes)
