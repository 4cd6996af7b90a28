"""Mode collapse: Eq. 13/14 against the simulated update, and the 2-D toy's outcome."""
import numpy as np
import pytest

from normattn_jax.analysis import mode_collapse as mc

# The updates run op by op, and each op compiles anew at each number of points: the simulated
# pairs of masses hold 35 points (the fast case below), the clouds 200 + 20.
MASSES = ((7, 28), (28, 7))  # r = 0.25 and 4
CLOUD = {"n0": 200, "n1": 20}


@pytest.mark.parametrize("a", [0.3, 0.8, 1.2])
@pytest.mark.parametrize("n0,n1", [(10, 10), (30, 5), (4, 40)])
@pytest.mark.fast_subset(lambda p: p["a"] == 0.8 and p["n0"] == 30)  # one path, other numbers
def test_analytic_center_distances_match_the_simulated_update(a, n0, n1):
  r = n0 / n1
  np.testing.assert_allclose(mc.simulated_center_distance(n0, n1, a, "unas"),
                             mc.center_distance_unas(r, a), rtol=1e-4)
  np.testing.assert_allclose(mc.simulated_center_distance(n0, n1, a, "dnas"),
                             mc.center_distance_dnas(r, a), rtol=1e-4)


def test_dnas_distance_upper_bounds_unas_and_they_meet_at_balance():
  r = np.geomspace(0.05, 20, 50)
  for a in (0.5, 1.0, 1.5):
    assert (mc.center_distance_dnas(r, a) >= mc.center_distance_unas(r, a) - 1e-12).all()
    np.testing.assert_allclose(mc.center_distance_dnas(1.0, a), mc.center_distance_unas(1.0, a))


def test_unbalanced_toy_unas_collapses_dnas_keeps_two_clusters():
  points, _ = mc.two_gaussians(**CLOUD)
  assert mc.count_clusters(points) == 2
  assert mc.count_clusters(mc.trajectory(points, "unas")[-1]) == 1
  assert mc.count_clusters(mc.trajectory(points, "dnas")[-1]) == 2


def test_the_center_distance_check_is_eq13_and_eq14_beside_the_simulation():
  check = mc.center_distance_check(scales=(1.0,), sizes=MASSES, ratios=np.array([0.5, 2.0]))
  scale = check["scales"][1.0]
  np.testing.assert_allclose(scale["unas"], mc.center_distance_unas(np.array([0.5, 2.0]), 1.0))
  np.testing.assert_allclose(scale["dnas"], mc.center_distance_dnas(np.array([0.5, 2.0]), 1.0))
  assert [(p["r"], p["scheme"]) for p in scale["simulated"]] == [
      (0.25, "unas"), (0.25, "dnas"), (4.0, "unas"), (4.0, "dnas")]
  errors = [abs(p["simulated"] - p["analytic"]) for p in scale["simulated"]]
  assert mc.largest_error(check) == max(errors) < 1e-3


def test_cluster_counts_follow_each_schemes_trajectory():
  points, _ = mc.two_gaussians(**CLOUD)
  clouds = mc.trajectories(points)
  assert list(clouds) == ["unas", "dnas"] and all(len(c) == 5 for c in clouds.values())
  counts = mc.cluster_counts(clouds)
  assert counts == {s: [mc.count_clusters(c) for c in clouds[s]] for s in clouds}
  assert counts["unas"][0] == counts["dnas"][0] == 2


def test_points_that_diverged_belong_to_no_mode():
  points = np.array([[0.0, 0.0], [0.1, 0.0], [np.inf, 0.0], [np.nan, 1.0], [5.0, 5.0], [5.1, 5.0]])
  assert mc.count_clusters(points) == 2
  assert mc.count_clusters(np.full((4, 2), np.nan)) == 0
