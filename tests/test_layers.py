"""The floors of docs/ARCHITECTURE.md hold in the code: every import of a ``normattn_jax``
module (function-local ones included) goes to a lower floor, or stays in its own room; so no
import runs up and the rooms form no cycle. Read from the source, nothing imported."""
import ast
import os
import re

from helpers import REPO

PACKAGE = os.path.join(REPO, "normattn_jax")
FLOOR_LINE = re.compile(r"^floor\s+(\d+)\s+(.*)$")
ROOM = re.compile(r"\b([a-z_]+)(?:/|\.py)(?=\s|$)")


def drawn_floors() -> dict:
  """``{room: floor}`` from the drawing of the levels: its ``floor N  room/ module.py ...``
  lines."""
  with open(os.path.join(REPO, "docs", "ARCHITECTURE.md")) as f:
    text = f.read()
  floors = {}
  for line in text.splitlines():
    match = FLOOR_LINE.match(line)
    if match:
      floors.update({room: int(match[1]) for room in ROOM.findall(match[2])})
  return floors


def room_of(module: str) -> str:
  """The room a module path names: the package or top-level module under ``normattn_jax``."""
  return module.split(".")[1]


def imports(path: str) -> list:
  """``(line, module)`` of every import of a ``normattn_jax`` module in the file, at any depth
  (``from normattn_jax import x`` names the module ``normattn_jax.x``)."""
  found = []
  for node in ast.walk(ast.parse(open(path).read())):
    if isinstance(node, ast.Import):
      found += [(node.lineno, a.name) for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      if node.module == "normattn_jax":
        found += [(node.lineno, f"normattn_jax.{a.name}") for a in node.names]
      else:
        found.append((node.lineno, node.module))
  return [(line, name) for line, name in found if name.startswith("normattn_jax.")]


def rooms() -> list:
  """Every room of the package (the package's own ``__init__.py`` is its face, no room)."""
  return sorted(name[:-3] if name.endswith(".py") else name for name in os.listdir(PACKAGE)
                if (name.endswith(".py") and name != "__init__.py")
                or os.path.isfile(os.path.join(PACKAGE, name, "__init__.py")))


def test_every_room_is_on_a_floor():
  floors = drawn_floors()
  assert set(floors) == set(rooms()), (sorted(set(rooms()) - set(floors)),
                                       sorted(set(floors) - set(rooms())))


def test_every_import_goes_down_a_floor():
  floors = drawn_floors()
  upward = []
  for folder, _, files in os.walk(PACKAGE):
    for name in files:
      path = os.path.join(folder, name)
      if not name.endswith(".py") or path == os.path.join(PACKAGE, "__init__.py"):
        continue
      source = room_of(os.path.relpath(path, REPO)[:-3].replace(os.sep, "."))
      for line, module in imports(path):
        target = room_of(module)
        if target != source and floors[target] >= floors[source]:
          upward.append(f"{os.path.relpath(path, REPO)}:{line} imports {module} "
                        f"(floor {floors[source]} -> {floors[target]})")
  assert not upward, "\n".join(upward)
