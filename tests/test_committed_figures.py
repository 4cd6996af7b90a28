"""Every committed figure was drawn by the current drawing code and says where it comes from:
each carries ``provenance.FIGURE_VERSION`` and its provenance (the experiment, the scale, the
seeds, the machine), read from its run's files (``experiments/redraw_figures.py`` redraws them
all), so none falls behind its key or loses its origin again."""
import glob
import json
import os

import pytest

from normattn_jax.reporting import provenance

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")


def committed_figures() -> list[str]:
  return sorted(glob.glob(os.path.join(RESULTS, "**", "*.png"), recursive=True))


def test_there_are_committed_figures():
  assert len(committed_figures()) > 200


@pytest.mark.parametrize("path", committed_figures(),
                         ids=lambda path: os.path.relpath(path, RESULTS))
def test_a_committed_figure_says_where_it_comes_from(path):
  assert provenance.figure_version(path) == provenance.FIGURE_VERSION, (
      f"{path} was drawn by another version of the drawing code: "
      "python experiments/redraw_figures.py redraws it")
  stamped = provenance.provenance_of(path)
  assert stamped is not None, f"{path} carries no provenance"
  for field in ("experiment", "scale", "seeds", "machine"):
    assert getattr(stamped, field) not in ("", provenance.NOT_RECORDED), (path, field)


def test_the_machine_and_the_experiment_are_read_from_the_runs_files(tmp_path):
  """A GPU by its name; a CPU by its model and cores where recorded; a note's machine where the
  run has no versions.json; a sub-run inherits its parent's experiment, not its machine."""
  describe = provenance.machine_of_versions
  assert describe({"backend": "gpu", "device_kind": "NVIDIA H100 80GB HBM3",
                   "device_count": 1}) == "NVIDIA H100 80GB HBM3"
  assert describe({"backend": "cpu", "device_kind": "cpu", "device_count": 2, "cpu_cores": 2,
                   "cpu_model": "Intel(R) Xeon(R) Processor"}) == (
      "Intel(R) Xeon(R) Processor, 2 cores, as 2 devices")
  assert describe({"backend": "cpu", "device_count": 1}) == "a CPU, its model not recorded"
  (tmp_path / "about.json").write_text(json.dumps(
      {"experiment": "NAP paper, Fig. 3", "machine": "a CPU, not recorded",
       "figures": {"b.png": {"scale": "N = 32"}}}))
  sub = tmp_path / "retrain_bert"
  sub.mkdir()
  (sub / "versions.json").write_text(json.dumps({"backend": "cpu", "device_count": 1}))
  assert provenance.of_figure(str(tmp_path / "b.png"), seeds="3 seeds") == provenance.Provenance(
      "NAP paper, Fig. 3", "N = 32", "3 seeds", "a CPU, not recorded")
  assert provenance.of_figure(str(sub / "a.png")) == provenance.Provenance(
      "NAP paper, Fig. 3", provenance.NOT_RECORDED, provenance.NOT_RECORDED,
      "a CPU, its model not recorded")


def test_a_figure_stamped_again_keeps_its_pixels_and_one_strip(tmp_path):
  import numpy as np
  from PIL import Image

  path = str(tmp_path / "f.png")
  Image.fromarray(np.full((40, 300, 3), 200, np.uint8)).save(path)
  stamp = provenance.Provenance("an experiment", "a scale", "1 seed", "a machine")
  provenance.restamp(path, stamp)
  with Image.open(path) as once:
    size, top = once.size, np.asarray(once.convert("RGB"))[:40]
  provenance.restamp(path, stamp)
  with Image.open(path) as twice:
    assert twice.size == size and size[1] > 40
    np.testing.assert_array_equal(np.asarray(twice.convert("RGB"))[:40], top)
  assert (top == 200).all() and provenance.provenance_of(path) == stamp
