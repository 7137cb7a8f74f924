"""Small fixes that keep the built book clean in the browser and readable offline.

- Each script is included once: sphinx-thebe adds its inline configuration again on every
  build pass, and a second ``const THEBE_JS_URL`` is a JavaScript error on every page.
- ipywidgets' HTML manager typesets widget labels through the MathJax 2 call
  ``MathJax.Hub.Queue``; the book loads MathJax 3, so that one call is provided.
- The HTML manager loads its icon fonts relative to its own module's URL (and
  ``window.__jupyter_widgets_assets_path__``); both are pointed at this build's
  ``_static/widgets/`` (fetched there from the npm registry), so nothing comes from a CDN
  and nothing 404s, whatever folder a page is in.
"""

from __future__ import annotations

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


def setup(app):
    app.add_js_file(None, body=PAGE_SHIMS, priority=100)
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
