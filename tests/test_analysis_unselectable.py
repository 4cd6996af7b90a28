"""Unselectable keys agree with convex-hull vertices; LayerNorm leaves none."""
import numpy as np
import pytest
from scipy.spatial import ConvexHull

from normattn_jax.analysis.unselectable import (fraction_grids, fraction_with_unselectable,
                                                layer_norm, unselectable)


@pytest.mark.parametrize("d", [2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_agrees_with_convex_hull_vertices(d, seed):
  points = np.random.default_rng(seed).standard_normal((25, d))
  interior = np.ones(len(points), bool)
  interior[ConvexHull(points).vertices] = False
  np.testing.assert_array_equal(unselectable(points), interior)


def test_a_point_inside_a_triangle_and_duplicates():
  triangle = np.array([[0.0, 0.0], [4.0, 0.0], [0.0, 4.0], [1.0, 1.0], [2.0, 2.0]])
  # (1, 1) is inside; (2, 2) lies on the edge between two vertices: no strict winner either
  np.testing.assert_array_equal(unselectable(triangle), [False, False, False, True, True])
  twins = np.array([[1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
  np.testing.assert_array_equal(unselectable(twins), [True, True, False])


def test_layer_norm_makes_every_key_selectable():
  rng = np.random.default_rng(1)
  points = rng.standard_normal((60, 4))
  assert unselectable(points).any()
  normed = layer_norm(points)
  np.testing.assert_allclose(np.linalg.norm(normed, axis=1), 2.0)  # sqrt(d)
  np.testing.assert_allclose(normed.sum(axis=1), 0.0, atol=1e-12)
  assert not unselectable(normed).any()


def test_fraction_grows_with_n_without_layer_norm():
  assert fraction_with_unselectable(3, 4, 10, False) < fraction_with_unselectable(3, 40, 10, False)
  assert fraction_with_unselectable(3, 40, 10, True) == 0.0


def test_bad_points():
  with pytest.raises(ValueError, match="points"):
    unselectable(np.zeros(3))


def test_fraction_grids_are_every_cell_without_and_with_layer_norm():
  grids = fraction_grids([3, 4], [4, 6, 8], 5)
  assert list(grids) == ["without_layer_norm", "with_layer_norm"]
  assert grids["without_layer_norm"][1][2] == fraction_with_unselectable(4, 8, 5, False)
  assert np.shape(grids["with_layer_norm"]) == (2, 3) and not np.any(grids["with_layer_norm"])
