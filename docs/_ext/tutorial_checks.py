"""Checks of the executed tutorials, run as the docs build (a Sphinx extension) and by the tests:
no WARNING block in an output (absl's and Python's warnings, a library's log at WARNING), no
stray repr of a plotting object (``Text(0.5, 0.98, ...)`` after ``fig.suptitle``), no code line
past ``MAX_COLUMNS``. The build reads each tutorial's executed notebook as myst-nb wrote it
(``_build/jupyter_execute/<page>.ipynb``) and reports every problem as a warning, which
``make docs`` (``-W``) turns into a failure."""
import json
import os
import re

MAX_COLUMNS = 88
# Python's logging ("WARNING:absl:..."), absl's own lines ("W1128 17:50:18.1 ..."), and
# ``warnings.warn``'s ("file.py:12: UserWarning: ...").
WARNING = re.compile(r"^(WARNING\b|W\d{4} \d\d:\d\d)|\b\w*Warning: ", re.M)
# What a cell shows when its last line returns a plotting object instead of drawing it.
STRAY_REPR = re.compile(r"^\[?<?(Text\(|Figure size|matplotlib\.|Axes|AxesImage)")


def _text(value) -> str:
  return "".join(value) if isinstance(value, list) else str(value)


def problems(notebook: dict) -> list:
  """Every problem of an executed notebook (nbformat 4, as a dict).

  Args:
    notebook: the notebook.

  Returns:
    One line per problem, naming the cell (counted from 1 among the code cells) and what it
    shows.
  """
  found = []
  code_cells = [cell for cell in notebook.get("cells", []) if cell.get("cell_type") == "code"]
  for number, cell in enumerate(code_cells, start=1):
    for line in _text(cell.get("source", "")).splitlines():
      if len(line) > MAX_COLUMNS:
        found.append(f"code cell {number}: a line of {len(line)} columns (at most "
                     f"{MAX_COLUMNS}): {line[:60]}...")
    for output in cell.get("outputs", []):
      text = _text(output.get("text", ""))
      warning = WARNING.search(text) if output.get("output_type") == "stream" else None
      if warning:
        line = text[text.rfind("\n", 0, warning.start()) + 1:].splitlines()[0]
        found.append(f"code cell {number}: a warning in its output: {line[:120]}")
      plain = _text(output.get("data", {}).get("text/plain", ""))
      if output.get("output_type") == "execute_result" and STRAY_REPR.match(plain):
        found.append(f"code cell {number}: a stray repr in its output: {plain[:60]} (end the "
                     f"cell with a statement, e.g. plt.show())")
  return found


def _check_executed(app, doctree) -> None:
  """After a tutorial is read: the problems of its executed notebook, as warnings."""
  from sphinx.util import logging
  docname = app.env.docname
  path = os.path.join(os.path.dirname(app.outdir), "jupyter_execute", docname + ".ipynb")
  if not docname.startswith("tutorials/") or not os.path.exists(path):
    return
  with open(path) as f:
    notebook = json.load(f)
  logger = logging.getLogger(__name__)
  for problem in problems(notebook):
    logger.warning(f"{docname}: {problem}", location=docname)


def setup(app):
  """Registers the check of each executed tutorial."""
  app.connect("doctree-read", _check_executed)
  return {"parallel_read_safe": True, "parallel_write_safe": True}
