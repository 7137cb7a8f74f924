"""Small fixes that keep the built book clean in the browser, light to load and readable offline.

- Each script is included once: sphinx-thebe adds its inline configuration again on every
  build pass, and a second ``const THEBE_JS_URL`` is a JavaScript error on every page.
- ipywidgets' HTML manager typesets widget labels through the MathJax 2 call
  ``MathJax.Hub.Queue``; the book loads MathJax 3, so that one call is provided.
- The HTML manager loads its icon fonts relative to its own module's URL (and
  ``window.__jupyter_widgets_assets_path__``); both are pointed at this build's
  ``_static/widgets/`` (fetched there from the npm registry), so nothing comes from a CDN
  and nothing 404s, whatever folder a page is in.
- Search: the input of a cell tagged ``hide-input`` (plotting code) gets the class
  ``no-search`` and stays out of the search index, so that searching a concept finds the
  chapter that teaches it rather than a ``rotation=90`` in a plot. Sphinx skips such nodes
  from version 8.2 (sphinx-doc/sphinx#11280); this Sphinx (7.4, pinned by Jupyter Book 1)
  does not, so each page is indexed here from a copy without them.
  On the search page, excerpts leave out those cells too and show maths as text
  (``√d_k·α``) rather than as raw LaTeX (``_static/search-excerpts.js``).
- MathJax: of the components sphinx-mathjax-offline ships (24 MB, all copied into the build),
  pages load only the ones the book uses (the TeX input with its usual packages, the CommonHTML
  output and the hidden MathML that screen readers read) instead of ``tex-chtml.js``, which adds
  the 0.4 MB right-click menu; the rest is left out of the build. TeX packages outside the usual
  ones are still loaded on demand by MathJax's ``autoload``, so their files stay.
- Theme: the header bar that held only a second search box (pydata-sphinx-theme's
  ``navbar_persistent``, which sphinx-book-theme 1.3 no longer empties) is gone; search stays
  in the sidebar, behind the article header's search button and on Ctrl+K. Pages leave out
  Font Awesome's 1.5 MB script (``templates/layout.html``): the theme's style sheet already
  draws the same icons from Font Awesome's web fonts. Only the search page loads the search
  index and scripts (the theme loads them on every page for a search-as-you-type that is off).
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx.builders.html import StandaloneHTMLBuilder

HERE = Path(__file__).resolve().parent
NO_SEARCH = "no-search"
HIDDEN_INPUT_MODES = {"input", "input+output", "all"}  # myst-nb's hide_mode of a cell

# What the pages load, instead of tex-chtml.js (which is these plus "ui/menu").
MATHJAX_LOAD = ["input/tex", "output/chtml", "a11y/assistive-mml"]
# What stays in _static/mathjax: those, what they load in turn, and the TeX extensions that
# "autoload" fetches when a page uses a macro outside the usual packages.
MATHJAX_KEEP = [
    "startup.js", "core.js", "input/tex.js", "input/tex/extensions", "output/chtml.js",
    "output/chtml/fonts", "a11y/assistive-mml.js",
]

PAGE_SHIMS = r"""
(function () {
  var root = document.documentElement.dataset.content_root || "";
  var assets = new URL(root + "_static/widgets/", document.baseURI).href;
  window.__jupyter_widgets_assets_path__ = assets;
  // RequireJS reads a global `require` object as its configuration when it loads
  window.require = {paths: {"@jupyter-widgets/html-manager/dist": assets.replace(/\/$/, "")}};
  function install() {
    var mj = window.MathJax;
    if (mj && !mj.Hub) {
      mj.Hub = {Queue: function () { if (mj.typesetPromise) { mj.typesetPromise(); } }};
    }
  }
  install();
  document.addEventListener("DOMContentLoaded", install);
  window.addEventListener("load", install);
})();
"""


def _configure(app, config):
    theme_options = config.html_theme_options
    theme_options.setdefault("navbar_persistent", [])
    config.templates_path = [*config.templates_path, str(HERE / "templates")]
    config.mathjax_path = "mathjax/startup.js"
    mathjax = dict(config.mathjax3_config or {})
    mathjax["loader"] = {**mathjax.get("loader", {}), "load": MATHJAX_LOAD}
    config.mathjax3_config = mathjax


def _keep_hidden_input_out_of_search(app, doctree):
    for cell in doctree.findall(nodes.container):
        if cell.get("nb_element") == "cell_code" and cell.get("hide_mode") in HIDDEN_INPUT_MODES:
            for child in cell.children:
                if isinstance(child, nodes.Element) and child.get("nb_element") == "cell_code_source":
                    child["classes"].append(NO_SEARCH)


def _is_no_search(node) -> bool:
    return isinstance(node, nodes.Element) and NO_SEARCH in node["classes"]


def _index_without_no_search_nodes(app):
    """Feed the search index a copy of each page without its ``no-search`` nodes (as Sphinx 8.2+ does)."""
    builder = app.builder
    if not isinstance(builder, StandaloneHTMLBuilder):
        return
    index_page = builder.index_page

    def index_searchable_part(pagename, doctree, title):
        if next(doctree.findall(_is_no_search), None) is not None:
            doctree = doctree.deepcopy()
            for node in list(doctree.findall(_is_no_search)):
                node.parent.remove(node)
        index_page(pagename, doctree, title)

    builder.index_page = index_searchable_part


def _dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        attributes = getattr(js, "attributes", {}) or {}
        key = (getattr(js, "filename", None) or "", tuple(sorted((k, str(v)) for k, v in attributes.items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def _prune_mathjax(app, exception):
    """Remove from _static/mathjax every component the pages never load."""
    mathjax = Path(app.outdir) / "_static" / "mathjax"
    if exception is not None or not mathjax.is_dir():
        return
    keep = [mathjax / path for path in MATHJAX_KEEP]
    for path in sorted(mathjax.rglob("*"), reverse=True):  # children before their folders
        if any(path == k or k in path.parents for k in keep):
            continue
        if path.is_file():
            path.unlink()
        elif not any(path.iterdir()):
            path.rmdir()


def setup(app):
    app.add_js_file(None, body=PAGE_SHIMS, priority=100)
    app.connect("config-inited", _configure)
    app.connect("builder-inited", _index_without_no_search_nodes)
    app.connect("doctree-read", _keep_hidden_input_out_of_search)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    # after sphinx-mathjax-offline has copied MathJax into the build (default priority 500)
    app.connect("build-finished", _prune_mathjax, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
