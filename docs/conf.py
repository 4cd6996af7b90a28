"""Sphinx configuration of the docs site: MyST markdown pages, MyST notebooks executed through
jupyter-cache (myst-nb), the API reference from the docstrings (autodoc + autosummary, Google
style through napoleon), links to jax's, flax's, optax's and numpy's own references
(intersphinx)."""
import importlib
import inspect
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(DOCS, "_ext"))

import normattn_jax  # noqa: E402
from api_names import public_names  # noqa: E402  (docs/_ext)

project = "normattn_jax"
release = version = normattn_jax.__version__
author = "The normattn_jax authors"
copyright = "2026, The normattn_jax authors"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon",
              "sphinx.ext.intersphinx", "sphinx.ext.mathjax", "sphinx.ext.viewcode",
              "tutorial_checks"]
templates_path = ["_templates"]
exclude_patterns = ["_build", "README.md", "jupyter_execute", "**.ipynb_checkpoints",
                    "_generated", "inventories"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

# The tutorials run through jupyter-cache: one whose code cells have not changed since its last
# run is not executed again, its outputs read from docs/_build/.jupyter_cache (which make docs
# keeps). make test-all executes every tutorial afresh (NB_EXECUTION_MODE=force). A cell that
# raises stops the build with the cell and its traceback.
nb_execution_mode = os.environ.get("NB_EXECUTION_MODE", "cache")
nb_execution_timeout = 1800  # a guard against a hung cell, not a budget: a busy machine is slow
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True

# ----- the API reference -----
# A public module's page (_templates/autosummary/public_module.rst) documents the names of its
# ``__all__`` (else its public functions and classes) that are at home there, one page each; a
# name exported by several public modules is at home in the deepest (``AttentionSpec`` in
# normattn_jax.attention, not normattn_jax), and the others link to it. An internal module's
# page (module.rst) documents the rest of what it defines. Each object is described once:
# two descriptions would make two targets for every cross-reference to it.

autosummary_generate = True
autosummary_imported_members = False


def _listed(page: str) -> list:
  """The modules that a page of the API reference lists in its autosummary directives."""
  with open(os.path.join(DOCS, page)) as f:
    return [line.strip() for line in f if line.startswith("   normattn_jax")]


PUBLIC_MODULES = _listed("api.md")
INTERNAL_MODULES = _listed("internals.md")


def _homes(modules: list) -> dict:
  """``{id(object): (home module, name)}``: each public object's home, the deepest public
  module that exports it (the last listed of equal depth)."""
  homes = {}
  for modname in modules:
    module = importlib.import_module(modname)
    for name in public_names(module):
      key = id(getattr(module, name))
      if key not in homes or modname.count(".") >= homes[key][0].count("."):
        homes[key] = (modname, name)
  return homes


HOMES = _homes(PUBLIC_MODULES)


def _public_context() -> tuple:
  """The names each public module documents (``home``) and links to (``linked``, as full
  names), and the names each internal module leaves to the public pages (``excluded``)."""
  home, linked, excluded = {}, {}, {}
  for modname in PUBLIC_MODULES:
    module = importlib.import_module(modname)
    home[modname], linked[modname] = [], []
    for name in public_names(module):
      where, its_name = HOMES[id(getattr(module, name))]
      if where == modname:
        home[modname].append(name)
      else:
        linked[modname].append(f"{where}.{its_name}")
  for modname in INTERNAL_MODULES:  # (autodoc leaves out what a module imports)
    module = importlib.import_module(modname)
    excluded[modname] = sorted(name for name, value in vars(module).items()
                               if id(value) in HOMES and not name.startswith("_"))
  return home, linked, excluded


_home, _linked, _excluded = _public_context()
autosummary_context = {"home": _home, "linked": _linked, "excluded": _excluded}

autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented_params"  # no list of undocumented names
autodoc_type_aliases = {"Array": "jax.Array"}  # the modules' alias, linked to jax's page

autodoc_member_order = "bysource"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

# ----- links to the libraries' own references -----
# Each maps to the project's site; the inventory is fetched from there when the network
# reaches it (Read the Docs), else read from docs/inventories/, which names the objects these
# pages refer to with their addresses on those sites (Sphinx's plain-text inventory format), so
# that the build works offline and still links them.
INVENTORIES = os.path.join(DOCS, "inventories")
intersphinx_mapping = {
    name: (site, (None, os.path.join(INVENTORIES, f"{name}.txt")))
    for name, site in (("jax", "https://docs.jax.dev/en/latest/"),
                       ("flax", "https://flax-linen.readthedocs.io/en/latest/"),
                       ("flax_nnx", "https://flax.readthedocs.io/en/latest/"),
                       ("optax", "https://optax.readthedocs.io/en/latest/"),
                       ("numpy", "https://numpy.org/doc/stable/"))}
intersphinx_timeout = 10

html_theme = "sphinx_book_theme"
html_title = "normattn_jax"
# The sidebar shows the pages down to the API's module pages, not the page of each name: the
# theme renders the navigation tree into every page, and the ~200 pages of names made that most
# of a build's time.
html_theme_options = {"show_toc_level": 2, "navigation_with_keys": False,
                      "max_navbar_depth": 2, "collapse_navbar": True}


def _skip_function_fields(app, what, name, obj, skip, options):
  """Leave out a class attribute that holds a function defined elsewhere: a dataclass field
  whose default is a function (``Task.check``, ``HeadParam.constrain``, a flax module's
  ``kernel_init``). autodoc would document the default as a method of the class, beside the
  attribute that the class docstring's ``Attributes:`` section describes."""
  if (what == "class" and (inspect.isfunction(obj) or inspect.isclass(obj))
      and not obj.__qualname__.endswith("." + name)):
    return True  # (a field whose default is a class, param_dtype=jnp.float32, alike)
  if name == "__init__" and not (getattr(obj, "__doc__", None) or "").strip():
    return True  # a dataclass's generated one: the class's signature says it all
  return None


def _attribute_doc(name: str, obj) -> list:
  """The ``#:`` comment of the module attribute ``name`` holding ``obj``, read where it is
  assigned (a package that re-exports it has none); [] without one."""
  from sphinx.pycode import ModuleAnalyzer
  for modname, module in sorted(sys.modules.items()):
    if modname.startswith("normattn_jax") and getattr(module, name, None) is obj:
      try:
        doc = ModuleAnalyzer.for_module(modname).find_attr_docs().get(("", name))
      except Exception:  # a module without source
        doc = None
      if doc:
        return list(doc)
  return []


def _data_docstring(app, what, name, obj, options, lines):
  """A module attribute is described by its ``#:`` comment, wherever it is assigned, never by
  its type's docstring (a tuple's "Built-in immutable sequence...")."""
  type_doc = inspect.getdoc(type(obj)) or ""
  if what == "data" and "\n".join(lines).strip() == type_doc.strip():
    lines[:] = _attribute_doc(name.rsplit(".", 1)[-1], obj)


def _write_normalisations_table(app):
  """docs/_generated/normalizations.md: the registry's table of the built-in normalisations
  (``attention.properties.table``), which the normalisations guide includes."""
  from normattn_jax.attention import properties
  folder = os.path.join(DOCS, "_generated")
  os.makedirs(folder, exist_ok=True)
  text = properties.table() + "\n"
  path = os.path.join(folder, "normalizations.md")
  if not os.path.exists(path) or open(path).read() != text:  # unchanged: no rebuild
    with open(path, "w") as f:
      f.write(text)


def setup(app):
  """Connects ``_skip_function_fields`` and ``_data_docstring``; writes the normalisations'
  table."""
  app.connect("autodoc-skip-member", _skip_function_fields)
  app.connect("autodoc-process-docstring", _data_docstring)
  app.connect("builder-inited", _write_normalisations_table)
