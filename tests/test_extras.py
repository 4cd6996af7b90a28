"""The core install (jax, flax, optax, chex, numpy) runs the models; the extras say when missing;
every results folder records the versions it ran with."""
import ast
import functools
import glob
import importlib.metadata
import json
import os
import re
import runpy
import subprocess
import sys
import textwrap

import pytest

from normattn_jax import _extras

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CORE = ("jax", "flax", "optax", "chex", "numpy")
# Always outside the core install, whatever jax and flax come to depend on.
OPTIONAL = ("tensorflow_datasets", "array_record", "sentencepiece", "tokenizers", "safetensors",
            "wordfreq", "matplotlib", "ml_collections", "tqdm", "tensorboardX")


def _key(name):
  return re.sub(r"[-_.]+", "-", name).lower()


def core_closure():
  """The distributions that ``pip install normattn_jax`` brings: the core and what it requires
  (conditional requirements counted, extras not)."""
  seen, todo = set(), list(CORE)
  while todo:
    name = todo.pop()
    if _key(name) in seen:
      continue
    try:
      requires = importlib.metadata.distribution(name).requires or []
    except importlib.metadata.PackageNotFoundError:
      continue
    seen.add(_key(name))
    todo += [re.match(r"[A-Za-z0-9._-]+", r).group() for r in requires if "extra ==" not in r]
  return seen


def not_in_core():
  """The import names of the installed distributions outside the core install."""
  core = core_closure() | {"normattn-jax"}
  return sorted(module for module, dists in importlib.metadata.packages_distributions().items()
                if not any(_key(d) in core for d in dists))


CORE_ONLY = textwrap.dedent("""
    import pkgutil
    import sys

    BLOCKED = set(sys.argv[1].split(","))
    STARTUP = set(sys.modules)  # what site's .pth files loaded before any import here

    class Blocker:
      # A core install: the optional packages are not there.
      def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
          raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

    sys.meta_path.insert(0, Blocker())

    import jax
    import jax.numpy as jnp
    import numpy as np

    import normattn_jax
    from normattn_jax import MultiHeadAttention, SequenceModel, TransformerBlock
    from normattn_jax import norms, tasks
    from normattn_jax.analysis import mixing, mode_collapse
    from normattn_jax.models import bert

    def run(module, inputs):
      # init and apply each one compiled program: eagerly, every op is one
      return jax.jit(module.apply)(jax.jit(module.init)(key, inputs), inputs)

    key = jax.random.key(0)
    x = jax.random.normal(key, (2, 6, 8))
    for module in (MultiHeadAttention(num_heads=2, normalization="nap"),
                   TransformerBlock(num_heads=2, arch="mte")):
      assert run(module, x).shape == x.shape
    tokens = jax.random.randint(key, (2, 6), 0, 20)
    model = SequenceModel(vocab_size=20, max_len=6, d_model=8, num_layers=1, num_heads=2)
    assert run(model, tokens).shape == (2, 6)
    config = bert.BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=16,
                             max_position_embeddings=8)
    encoder = bert.BertModel(config)
    ids = jnp.ones((1, 5), jnp.int32)
    hidden = run(encoder, ids)["last_hidden_state"]
    assert hidden.shape == (1, 5, 8) and np.isfinite(np.asarray(hidden)).all()

    def error(call):
      try:
        call()
      except ImportError as err:
        return str(err)
      raise AssertionError(f"{call} ran without its extra")

    def imported(name):
      return lambda: __import__(name)

    print(error(lambda: bert.load_tokenizer("nowhere")))
    print(error(lambda: mixing.wordfreq_frequencies(["word"])))
    print(error(imported("normattn_jax.train")))
    print(error(imported("normattn_jax.data")))
    print(error(imported("normattn_jax.reporting.figures")))
    unnamed = []  # every module imports, or says which extra it needs
    for module in pkgutil.walk_packages(normattn_jax.__path__, "normattn_jax."):
      try:
        __import__(module.name)
      except ImportError as err:
        if "pip install 'normattn_jax[" not in str(err):
          unnamed.append(f"{module.name}: {err}")
    print("unnamed:", unnamed)
    loaded = {name.partition(".")[0] for name in set(sys.modules) - STARTUP}
    print("loaded:", sorted(BLOCKED & loaded))
    """)


def test_core_install_runs_the_models_and_names_the_missing_extra():
  blocked = not_in_core()
  assert set(OPTIONAL) <= set(blocked)
  done = subprocess.run([sys.executable, "-c", CORE_ONLY, ",".join(blocked)], cwd=REPO,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert done.returncode == 0, done.stderr
  lines = done.stdout.splitlines()
  assert lines == [
      "normattn_jax.models.bert needs the optional package tokenizers: "
      "pip install 'normattn_jax[bert]'",
      "normattn_jax.analysis.mixing needs the optional package wordfreq: "
      "pip install 'normattn_jax[analysis]'",
      "normattn_jax.train needs the optional package ml_collections: "
      "pip install 'normattn_jax[experiments]'",
      "normattn_jax.data.tfds_text needs the optional package tensorflow_datasets: "
      "pip install 'normattn_jax[pretrain]'",
      "normattn_jax.reporting.figures needs the optional package matplotlib: "
      "pip install 'normattn_jax[experiments]'",
      "unnamed: []",
      "loaded: []",
  ]


def test_every_extra_named_in_the_code_is_declared():
  with open(os.path.join(REPO, "setup.py")) as f:
    setup = f.read()
  for extra in _extras.EXTRAS:
    assert f'"{extra}":' in setup, extra
  with pytest.raises(ValueError, match="unknown extra"):
    _extras.require("numpy", "plots")


def test_a_resumed_run_keeps_the_versions_it_started_with(tmp_path, monkeypatch):
  from normattn_jax.train import checkpoint

  started = checkpoint.write_versions(str(tmp_path))
  later = dict(started, packages=dict(started["packages"], jax="99.0"))
  monkeypatch.setattr(checkpoint, "versions", lambda: later)
  checkpoint.write_versions(str(tmp_path))
  checkpoint.write_versions(str(tmp_path))  # the same again: recorded once
  with open(tmp_path / "versions.json") as f:
    recorded = json.load(f)
  assert {k: v for k, v in recorded.items() if k != "resumed_with"} == started
  assert recorded["resumed_with"] == [later]


# ----- the extras as declared: setup.py, _extras.NEEDED, the installing guide's table, imports ----

PACKAGE = os.path.join(REPO, "normattn_jax")


def declared():
  """setup.py's ``install_requires`` and ``extras_require``, as ``setup()`` receives them."""
  import setuptools

  captured = {}
  original = setuptools.setup
  setuptools.setup = lambda **kwargs: captured.update(kwargs)
  try:
    runpy.run_path(os.path.join(REPO, "setup.py"), run_name="setup_probe")
  finally:
    setuptools.setup = original
  return captured["install_requires"], captured["extras_require"]


def requirement_names(requirements):
  return {_key(re.match(r"[A-Za-z0-9._-]+", r).group()) for r in requirements}


def closure(names):
  """``names`` and every distribution they require (conditional requirements counted, extras
  not): what installing them brings."""
  seen, todo = set(), list(names)
  while todo:
    name = _key(todo.pop())
    if name in seen:
      continue
    seen.add(name)
    try:
      requires = importlib.metadata.distribution(name).requires or []
    except importlib.metadata.PackageNotFoundError:
      continue  # not installed here (e.g. torch): the name alone
    todo += [re.match(r"[A-Za-z0-9._-]+", r).group() for r in requires if "extra ==" not in r]
  return seen


@functools.lru_cache(maxsize=None)
def installs():
  """Per extra ("" the core install), the distributions a module of that extra may import: what
  installing it brings, but for the packages setup.py makes optional and the extra does not
  name (jax brings scipy today, which the project names in ``analysis``: others must not use
  it)."""
  core, extras = declared()
  base = requirement_names(core)
  named = {extra: requirement_names(requirements) for extra, requirements in extras.items()}
  optional = set().union(*named.values())
  return {"": closure(base) - optional,
          **{extra: closure(base | names) - (optional - names) for extra, names in named.items()}}


@functools.lru_cache(maxsize=None)
def top_level_distributions():
  return importlib.metadata.packages_distributions()


def distributions(import_name):
  """The distributions of a top-level import name; none for the standard library."""
  top = import_name.partition(".")[0]
  if top in sys.stdlib_module_names or top == "__future__":
    return set()
  dists = top_level_distributions().get(top, [top])
  return {_key(d) for d in dists}


def module_path(name):
  """The file of a module of the package, None if ``name`` is none."""
  base = os.path.join(REPO, *name.split("."))
  for path in (base + ".py", os.path.join(base, "__init__.py")):
    if os.path.exists(path):
      return path
  return None


def with_parents(name):
  """A module and the packages that importing it runs first."""
  parts = name.split(".")
  return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def top_level_imports(path):
  """``(third-party import names, modules of the package, (module, extra) of each top-level
  require call)`` of a file's module-level statements (those in functions run only when called)."""
  third, internal, required = set(), set(), set()
  statements = ast.parse(open(path).read()).body
  for statement in statements:
    for node in (ast.walk(statement) if isinstance(statement, (ast.If, ast.Try)) else [statement]):
      if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom) and node.level == 0:
        names = [node.module]
        if node.module.startswith("normattn_jax"):
          names += [f"{node.module}.{a.name}" for a in node.names
                    if module_path(f"{node.module}.{a.name}")]
      else:
        value = getattr(node, "value", None)
        if isinstance(value, ast.Call) and getattr(value.func, "id", "") == "require":
          required.add((value.args[0].value, value.args[1].value))
        continue
      for name in names:
        (internal if name.startswith("normattn_jax") else third).add(name)
  return third, internal, required


@functools.lru_cache(maxsize=None)
def direct_needs(path):
  """``(distributions, modules of the package with their parent packages)`` a file imports at
  top level."""
  third, internal, required = top_level_imports(path)
  local = os.path.dirname(path)  # a script's sibling module (benchmarks/grid_throughput.py)
  found = set().union(*(distributions(t) for t in third
                        if not os.path.exists(os.path.join(local, t + ".py"))),
                      *(distributions(module) for module, _ in required))
  modules = {part for module in internal for part in with_parents(module) if module_path(part)}
  return frozenset(found), frozenset(modules)


def needed_distributions(path):
  """The distributions that running a file's top level needs, through every module of the
  package it imports (and they import) at top level."""
  found, (seen, todo) = set(direct_needs(path)[0]), (set(), list(direct_needs(path)[1]))
  while todo:
    module = todo.pop()
    if module in seen:
      continue
    seen.add(module)
    dists, modules = direct_needs(module_path(module))
    found |= dists
    todo += modules
  return found


def needed_extra(name):
  """``_extras.NEEDED``'s extra of a module ("" for the core install)."""
  prefixes = [p for p in _extras.NEEDED if name == p or name.startswith(p + ".")]
  return _extras.NEEDED[max(prefixes, key=len)] if prefixes else ""


def package_modules():
  for folder, _, names in os.walk(PACKAGE):
    for file in names:
      if file.endswith(".py"):
        relative = os.path.relpath(os.path.join(folder, file), REPO)[:-3].replace(os.sep, ".")
        yield relative.removesuffix(".__init__")


def test_every_module_imports_only_what_its_extra_installs():
  wrong = []
  for name in package_modules():
    extra = needed_extra(name)
    missing = needed_distributions(module_path(name)) - installs()[extra] - {"normattn-jax"}
    if missing:
      wrong.append(f"{name} imports {sorted(missing)}, which {extra or 'the core install'} "
                   "does not provide")
  assert not wrong, "; ".join(wrong)


def test_every_require_names_an_extra_that_installs_the_package():
  wrong = []
  for name in package_modules():
    for node in ast.walk(ast.parse(open(module_path(name)).read())):
      if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "require":
        module, extra = node.args[0].value, node.args[1].value
        if not distributions(module) <= installs()[extra]:
          wrong.append(f"{name}: require({module!r}, {extra!r})")
  assert not wrong, "; ".join(wrong)


def readme_extras():
  """The installing guide's table of extras: ``{extra: (adds, for)}``."""
  with open(os.path.join(REPO, "docs", "guides", "installing.md")) as f:
    rows = re.findall(r"^\| `(\w+)` \| (.*?) \| (.*?) \|$", f.read(), flags=re.M)
  return {extra: (adds, used_for) for extra, adds, used_for in rows}


def test_the_installing_guides_table_adds_what_setup_py_declares():
  _, extras = declared()
  table = readme_extras()
  assert set(table) == set(extras) == set(_extras.EXTRAS) | {"test", "docs"}
  for extra, (adds, _) in table.items():
    if extra == "all":
      continue
    named = set()
    for part in adds.split(" + "):
      if part.startswith("`"):
        named |= requirement_names(extras[part.strip("`")])
      else:
        named |= {_key(re.match(r"[A-Za-z0-9._-]+", item.strip()).group())
                  for item in re.sub(r"\(.*?\)", "", part).split(",")}
    assert named == requirement_names(extras[extra]), extra
  everything = set().union(*(requirement_names(extras[e])
                             for e in ("experiments", "pretrain", "bert", "analysis")))
  assert requirement_names(extras["all"]) == everything


def test_the_installing_guides_table_names_each_part_under_the_extra_it_needs():
  table = readme_extras()
  for prefix, extra in _extras.NEEDED.items():
    short = prefix.removeprefix("normattn_jax.")
    used_for = table[extra][1]
    assert f"`{prefix}`" in used_for or f"`{short}`" in used_for, (prefix, extra)
  for extra, (_, used_for) in table.items():
    for token in re.findall(r"`([^`]+)`", used_for):
      if token.endswith(".py"):
        where = token if "/" in token else f"experiments/{token}"
        paths = glob.glob(os.path.join(REPO, where))
        assert paths, token
        for path in paths:
          missing = needed_distributions(path) - installs()[extra] - {"normattn-jax"}
          assert not missing, (token, extra, missing)
      else:  # a module or package (its parts of their own extra are named in their rows)
        name = token if token.startswith("normattn_jax") else f"normattn_jax.{token}"
        if module_path(name):
          assert installs()[needed_extra(name)] <= installs()[extra], (token, extra)


def test_matplotlib_is_imported_by_the_reporting_modules_alone():
  """The figures are drawn by normattn_jax.reporting; the training, analyses and scripts call
  it, so that they import (and run) without drawing."""
  drawing = []
  paths = [module_path(m) for m in package_modules()]
  paths += glob.glob(os.path.join(REPO, "experiments", "*.py"))
  for path in paths:
    if os.path.dirname(path) == os.path.join(PACKAGE, "reporting"):
      continue
    for node in ast.walk(ast.parse(open(path).read())):
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and node.module:
        names = [node.module]
      elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "require":
        names = [node.args[0].value]
      if any(n.partition(".")[0] == "matplotlib" for n in names):
        drawing.append(os.path.relpath(path, REPO))
  assert not drawing, drawing


def test_a_cpu_run_records_its_cpu_model():
  """A CPU's device kind is "cpu": versions.json names the machine by its model, which the
  figures' provenance reads."""
  from normattn_jax.reporting import provenance

  recorded = _extras.versions()
  assert recorded["backend"] == "cpu"  # the suite runs on a CPU
  assert recorded["cpu_model"] == _extras.cpu_description()[0]
  assert provenance.machine_of_versions(recorded).startswith(recorded["cpu_model"])
