"""Where a figure comes from, written along its bottom and into its PNG: the experiment (which
paper's figure or table), the scale (N, d, steps), the seeds and the machine, each read from the
files of the run it is drawn from.

A drawing function passes what its own data say (a sweep's config gives N, d, steps and seeds);
the rest comes from the folder the figure is written to. The machine: the run's
``versions.json`` (a GPU by its name; a CPU by its model where the run recorded it, and its
cores). The experiment, and what a run's files do not hold, from ``about.json`` (``ABOUT``), the
run's note of itself: ``{"experiment", "scale", "seeds", "machine"}``, each key optional, and
``"figures": {file name: {the same keys}}`` for a folder whose figures differ; a key the folder's
own note lacks is read from its parent's (a sweep's ``retrain_bert`` or a Fig. 5 arch's workdir
inherits its experiment), the machine only where the run has no ``versions.json`` of its own. A
field found nowhere is written as not recorded.

Every figure drawn here carries ``FIGURE_VERSION`` (``figure_version``) and its provenance as
JSON (``provenance_of``) in its PNG's text chunks; ``restamp`` adds the provenance to a committed
image whose data are not committed (e.g. a trained model's weight sums), keeping its pixels.
"""
from __future__ import annotations

import dataclasses
import json
import os
import textwrap

from normattn_jax._extras import require

matplotlib = require("matplotlib", "experiments")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ABOUT = "about.json"
VERSIONS = "versions.json"
# The version of the figures' drawing, written into every PNG drawn here (``figure_version``
# reads it back): raise it when a figure changes, and redraw the committed ones
# (``experiments/redraw_figures.py``).
FIGURE_VERSION = 3
STAMP_FIELD = "Software"
STAMP = f"normattn_jax.reporting.figures {FIGURE_VERSION}"
PROVENANCE_FIELD = "Provenance"
# A restamped image's height before its provenance strip, so that restamping it again replaces
# the strip instead of adding one.
ORIGINAL_HEIGHT_FIELD = "Original-Height"
FONT_SIZE = 7
NOT_RECORDED = "not recorded"


@dataclasses.dataclass(frozen=True)
class Provenance:
  """What a figure shows the result of, at which scale, over how many seeds, on which machine."""
  experiment: str
  scale: str
  seeds: str
  machine: str

  def line(self) -> str:
    """The four fields on one line, as the figure's strip writes them."""
    return f"{self.experiment} | {self.scale} | {self.seeds} | machine: {self.machine}"


def read_json_if_any(path: str):
  """A JSON file, or None where there is none."""
  try:
    with open(path) as f:
      return json.load(f)
  except FileNotFoundError:
    return None


def note(folder: str, figure: str = "") -> dict:
  """A folder's own ``about.json``, with its entry for ``figure`` (a file name) over it."""
  noted = read_json_if_any(os.path.join(folder, ABOUT)) or {}
  return {**{k: v for k, v in noted.items() if k != "figures"},
          **noted.get("figures", {}).get(figure, {})}


def write_note(folder: str, **fields: str) -> None:
  """Add ``fields`` (e.g. ``experiment="Fig. 3: ..."``) to a run folder's ``about.json`` where
  it has none of its own: what a command knows of its run that the run's files do not hold."""
  noted = read_json_if_any(os.path.join(folder, ABOUT)) or {}
  added = {k: v for k, v in fields.items() if v and k not in noted}
  if added:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, ABOUT), "w") as f:
      json.dump({**noted, **added}, f, indent=1)


def about(folder: str, figure: str = "") -> dict:
  """What a folder's note and its parent's say of a figure (the folder's own keys win)."""
  parent = os.path.dirname(os.path.abspath(folder))
  return {**note(parent, figure), **note(folder, figure)}


def machine_of_versions(versions: dict) -> str:
  """A machine as a run's ``versions.json`` (or a report card's fingerprint) records it."""
  count = versions.get("device_count", 1)
  if versions.get("backend") == "gpu":
    kind = versions.get("device_kind", "a GPU")
    return kind if count == 1 else f"{count} x {kind}"
  model = versions.get("cpu_model") or "a CPU, its model not recorded"
  cores = versions.get("cpu_cores")
  split = f", as {count} devices" if count and count > 1 else ""
  return f"{model}, {cores} cores{split}" if cores else f"{model}{split}"


def machine(folder: str, figure: str = "") -> str:
  """The machine a folder's run ran on: its own note's "machine", else its ``versions.json``'s,
  else its parent's note's, else not recorded."""
  own = note(folder, figure).get("machine")
  versions = read_json_if_any(os.path.join(folder, VERSIONS))
  return (own or (versions and machine_of_versions(versions))
          or about(folder, figure).get("machine") or NOT_RECORDED)


def of_figure(path: str, scale: str | None = None, seeds: str | None = None,
              experiment: str | None = None) -> Provenance:
  """The provenance of the figure at ``path``: ``scale`` and ``seeds`` as its data say them
  (else its folder's note), the experiment from the note (else ``experiment``), the machine
  (``machine``)."""
  folder, figure = os.path.dirname(path), os.path.basename(path)
  noted = about(folder, figure)
  return Provenance(experiment=noted.get("experiment") or experiment or NOT_RECORDED,
                    scale=scale or noted.get("scale") or NOT_RECORDED,
                    seeds=seeds or noted.get("seeds") or NOT_RECORDED,
                    machine=machine(folder, figure))


def seeds_text(count: int) -> str:
  """"1 seed", "3 seeds"."""
  return f"{count} seed" + ("" if count == 1 else "s")


def strip_lines(fig, text: str) -> list[str]:
  """``text`` wrapped to the figure's width at the strip's font size."""
  width = max(40, int(fig.get_figwidth() * 72 / (FONT_SIZE * 0.55)))
  return [line for part in text.split("\n") for line in textwrap.wrap(part, width) or [""]]


def metadata(provenance: Provenance, **more) -> dict:
  """A stamped PNG's text chunks: the drawing's version and the provenance as JSON."""
  return {STAMP_FIELD: STAMP, PROVENANCE_FIELD: json.dumps(dataclasses.asdict(provenance)),
          **more}


def save(fig, path: str, provenance: Provenance, dpi: int = 120, key: str = "",
         tight: bool = False) -> None:
  """Write ``fig`` with ``key`` (if any) and its provenance in a strip along its bottom, stamped
  with ``FIGURE_VERSION`` and the provenance, and close it.

  Args:
    fig: the figure.
    path: the PNG to write.
    provenance: where the figure comes from.
    dpi: its resolution.
    key: what its colours mean, above the provenance.
    tight: cut the image to what is drawn (``bbox_inches="tight"``), the strip below it: for a
      figure that lays itself out (a colour bar beside several axes); else the axes are laid
      out above the strip (``tight_layout``).
  """
  lines = strip_lines(fig, provenance.line())
  text = "\n".join(lines)
  line_height = FONT_SIZE * 1.45 / 72 / fig.get_figheight()  # a strip line, in figure heights
  if tight:  # below everything drawn (axis labels reach below the figure's own bottom)
    drawn = fig.get_tightbbox(fig.canvas.get_renderer())
    fig.text(0.5, drawn.y0 / fig.get_figheight() - 0.02, (key + "\n" if key else "") + text,
             ha="center", va="top", fontsize=FONT_SIZE)
  else:
    key_lines = len(strip_lines(fig, key)) if key else 0
    strip = (len(lines) + key_lines) * line_height + 0.12 / fig.get_figheight()
    fig.tight_layout(rect=(0, strip, 1, 1))
    if key:
      fig.text(0.5, 0.01 + len(lines) * line_height, key, ha="center", va="bottom",
               fontsize=FONT_SIZE, wrap=True)
    fig.text(0.5, 0.01, text, ha="center", va="bottom", fontsize=FONT_SIZE)
  fig.savefig(path, dpi=dpi, metadata=metadata(provenance),
              **({"bbox_inches": "tight"} if tight else {}))
  plt.close(fig)


def png_text(path: str) -> dict:
  """A PNG's text chunks."""
  from PIL import Image  # matplotlib's own dependency

  with Image.open(path) as image:
    return dict(image.info)


def figure_version(path: str):
  """The ``FIGURE_VERSION`` a PNG was drawn with, or None for one drawn before the stamp or
  elsewhere."""
  stamp = png_text(path).get(STAMP_FIELD, "")
  prefix = STAMP.rsplit(" ", 1)[0] + " "
  return int(stamp[len(prefix):]) if stamp.startswith(prefix) else None


def provenance_of(path: str) -> Provenance | None:
  """The provenance a PNG was stamped with, or None."""
  text = png_text(path).get(PROVENANCE_FIELD)
  return Provenance(**json.loads(text)) if text else None


def restamp(path: str, provenance: Provenance) -> None:
  """Stamp a committed image whose data are not committed: its pixels as they are (less the strip
  of an earlier stamp), with its provenance in a strip below them."""
  from PIL import Image

  with Image.open(path) as image:
    height = int(image.info.get(ORIGINAL_HEIGHT_FIELD, image.height))
    pixels = image.convert("RGBA").crop((0, 0, image.width, height))
  dpi = 100
  fig = plt.figure(figsize=(pixels.width / dpi, pixels.height / dpi))
  lines = strip_lines(fig, provenance.line())
  strip_px = int(len(lines) * FONT_SIZE * 1.45 / 72 * dpi) + 12
  fig.set_size_inches(pixels.width / dpi, (pixels.height + strip_px) / dpi)
  total = pixels.height + strip_px
  ax = fig.add_axes((0, strip_px / total, 1, pixels.height / total))
  ax.imshow(pixels, interpolation="nearest")
  ax.set_axis_off()
  fig.text(0.5, 4 / total, "\n".join(lines), ha="center", va="bottom", fontsize=FONT_SIZE)
  fig.savefig(path, dpi=dpi, metadata=metadata(provenance,
                                                **{ORIGINAL_HEIGHT_FIELD: str(pixels.height)}))
  plt.close(fig)
