"""Every committed figure of ``reporting.figures`` was drawn by the current drawing code: each
carries ``figures.FIGURE_VERSION`` (``experiments/redraw_figures.py`` redraws them all), so none
falls behind its key again."""
import glob
import os

import pytest

from normattn_jax.reporting import figures

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "results")
# The names the sweeps, the report cards and the comparison with the authors draw.
NAMES = ("accuracy.png", "case_accuracy.png", "learning_curves.png",
         "pixels_beside_authors.png")


def committed_figures() -> list[str]:
  return sorted(path for name in NAMES
                for path in glob.glob(os.path.join(RESULTS, "**", name), recursive=True))


def test_there_are_committed_figures():
  assert len(committed_figures()) > 100


@pytest.mark.parametrize("path", committed_figures(),
                         ids=lambda path: os.path.relpath(path, RESULTS))
def test_a_committed_figure_was_drawn_by_the_current_code(path):
  assert figures.figure_version(path) == figures.FIGURE_VERSION, (
      f"{path} was drawn by another version of reporting.figures: "
      "python experiments/redraw_figures.py redraws it")
