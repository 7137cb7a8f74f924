"""Build the HTML book into _build/html: `make book` runs this.

1. Fetch the ipywidgets embedding scripts (RequireJS and @jupyter-widgets/html-manager) from
   the npm registry once, into _static/widgets/, so the built book serves them itself and
   reads offline (no CDN at read time).
2. Clear Jupyter Book's execution cache when the library (its code, data or recorded
   results) has changed since the last build: the cache keys on a notebook's own code only,
   so without this a page could show output computed with an older transformer_lib.
3. Execute the notebooks of the table of contents that have no up-to-date entry in that cache,
   several at once (jupyter-cache's own parallel executor, one process per core), so a cold
   build takes the time of the slowest chapters rather than of all of them. A failing cell
   stops the build here; the notebook, the cell and its traceback are printed.
4. Run `jupyter-book build` with warnings as errors; it finds every notebook's outputs in the
   cache. A failing cell fails this step too, with the same report.
5. Write a gzip copy (``name.gz``) beside every large text file of the build (scripts, style
   sheets, pages), which a server that serves pre-compressed files sends instead (nginx's
   ``gzip_static``, and :func:`serve` here: ``python tools/build_book.py --serve`` reads the
   book on http://127.0.0.1:8000/, as the browser tests do).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WIDGETS = Path("_book_static") / "widgets"
NPM_PACKAGES = {  # package@version -> files to keep (relative to the package), target name
    "requirejs@2.3.8": [("require.js", "require.min.js")],
    # only the AMD bundle and the icon fonts it loads relative to itself (Jupyter Book includes
    # every .js file under _static, so the package's other bundles are left out)
    "@jupyter-widgets/html-manager@1.0.15": [("dist/embed-amd.js", "embed-amd.js"), ("dist", "fonts")],
}


def fetch_widget_scripts(root: Path) -> None:
    """Download the pinned npm packages' browser files into _book_static/widgets/ (once)."""
    widget_dir = root / WIDGETS
    if (widget_dir / "embed-amd.js").exists() and (widget_dir / "require.min.js").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("book: npm is needed once to fetch the ipywidgets scripts; install Node.js (apt-get install npm)")
    widget_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for spec, files in NPM_PACKAGES.items():
            out = subprocess.run([npm, "pack", spec, "--silent"], cwd=tmp, check=True,
                                 capture_output=True, text=True).stdout.split()[-1]
            with tarfile.open(Path(tmp) / out) as tar:
                tar.extractall(Path(tmp) / spec.replace("/", "_"), filter="data")
            package = Path(tmp) / spec.replace("/", "_") / "package"
            for source, target in files:
                src = package / source
                if src.is_dir():
                    for font in src.iterdir():
                        if font.suffix in {".woff2", ".woff", ".ttf", ".eot", ".svg"}:
                            shutil.copy2(font, widget_dir / font.name)
                else:
                    shutil.copy2(src, widget_dir / target)
    print(f"book: ipywidgets scripts fetched into {WIDGETS}")


def library_hash(root: Path) -> str:
    """A digest of every file of transformer_lib (names and contents): code, data and records."""
    digest = hashlib.sha256()
    for path in sorted((root / "transformer_lib").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def invalidate_cache_if_library_changed(root: Path) -> bool:
    """Delete the execution cache if the library differs from the one of the last build."""
    cache, stamp = root / "_build" / ".jupyter_cache", root / "_build" / ".library-hash"
    previous = stamp.read_text().strip() if stamp.exists() else None
    if previous != library_hash(root) and cache.exists():
        print("book: transformer_lib changed since the last build; re-executing every chapter")
        shutil.rmtree(cache)
        return True
    return False


def toc_notebooks(root: Path) -> list[Path]:
    """The notebooks that ``_toc.yml`` lists (its ``file:`` entries with an ``.ipynb`` on disk)."""
    import yaml

    files: list[str] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in {"file", "root"} and isinstance(value, str):
                    files.append(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load((root / "_toc.yml").read_text()))
    return [root / f"{name}.ipynb" for name in files if (root / f"{name}.ipynb").is_file()]


def execute_stale_notebooks(root: Path, timeout: int = 300) -> int:
    """Execute, in parallel, every toc notebook the execution cache has no outputs for.

    Returns the number executed; exits with the failing notebooks' tracebacks if any cell fails.
    """
    from jupyter_cache import get_cache
    from jupyter_cache.executors import load_executor

    cache = get_cache(str(root / "_build" / ".jupyter_cache"))
    uris = [str(nb) for nb in toc_notebooks(root)]
    for uri in uris:
        cache.add_nb_to_project(uri)
    stale = [record.uri for record in cache.list_unexecuted(filter_uris=uris)]
    if not stale:
        return 0
    print(f"book: executing {len(stale)} notebook(s) on {os.cpu_count()} core(s)")
    executor = load_executor("local-parallel", cache=cache)
    result = executor.run_and_cache(filter_uris=stale, timeout=timeout, allow_errors=False)
    failed = result.excepted + result.errored
    if failed:
        for uri in failed:
            name = Path(uri).relative_to(root).with_suffix("")
            print(f"\n===== execution failed: {name} =====")
            print(cache.get_project_record(uri).traceback or "(no traceback recorded)")
        sys.exit(f"book: {len(failed)} notebook(s) failed to execute")
    return len(stale)


def report_failures(root: Path) -> None:
    """Print the saved traceback (notebook, cell, error) of every notebook that failed to execute."""
    reports = root / "_build" / "html" / "reports"
    for log in sorted(reports.rglob("*.err.log")):
        print(f"\n===== execution failed: {log.relative_to(reports).with_suffix('')} =====")
        print(log.read_text())


COMPRESSED_SUFFIXES = {".js", ".css", ".html", ".svg", ".json"}
COMPRESS_MIN_BYTES = 10_000


def compress_assets(html: Path) -> int:
    """Write ``name.gz`` beside every text file of the build of at least 10 kB, afresh each build.

    Copies are rewritten rather than kept by date (Sphinx copies static files with their
    package's dates), and a copy whose file is gone is deleted. Returns the number written.
    """
    for gz in html.rglob("*.gz"):
        gz.unlink()
    written = 0
    for path in html.rglob("*"):
        if (path.suffix in COMPRESSED_SUFFIXES and path.is_file()
                and path.stat().st_size >= COMPRESS_MIN_BYTES):
            # mtime=0: the same file gives the same bytes, build after build
            path.with_name(path.name + ".gz").write_bytes(gzip.compress(path.read_bytes(), compresslevel=9, mtime=0))
            written += 1
    return written


class BookRequestHandler(http.server.SimpleHTTPRequestHandler):
    """A static file server that sends a file's ``.gz`` copy to a browser that accepts gzip."""

    def send_head(self):
        path = self.translate_path(self.path)
        gz = path + ".gz"
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not (accepts and os.path.isfile(path) and os.path.isfile(gz)):
            return super().send_head()
        f = open(gz, "rb")  # the caller copies and closes it
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(os.fstat(f.fileno()).st_size))
        self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        return f

    def log_message(self, format, *args):  # quiet
        pass


@contextlib.contextmanager
def serve(html: Path, port: int = 0) -> Iterator[str]:
    """Serve the built book from a thread; yields its base URL (``port=0``: any free port)."""
    handler = lambda *args, **kwargs: BookRequestHandler(*args, directory=str(html), **kwargs)  # noqa: E731
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def build(root: Path = REPO) -> float:
    """Build the book in ``root``; exit with a message if any warning or cell fails."""
    fetch_widget_scripts(root)
    invalidate_cache_if_library_changed(root)
    shutil.rmtree(root / "_build" / "html" / "reports", ignore_errors=True)
    start = time.perf_counter()
    execute_stale_notebooks(root)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", str(root), "--builder", "html",
         "-W", "-n", "--keep-going"],
        cwd=root,
    )
    seconds = time.perf_counter() - start
    # whatever was written, even by a failed build, so that no copy is older than its file
    compress_assets(root / "_build" / "html")
    if result.returncode != 0:
        report_failures(root)
        sys.exit(f"book: build failed after {seconds:.0f} s (warnings count as errors)")
    (root / "_build" / ".library-hash").write_text(library_hash(root))
    print(f"book: built _build/html in {seconds:.1f} s")
    return seconds


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the book's folder (default: this repository)")
    parser.add_argument("--serve", type=int, nargs="?", const=8000, metavar="PORT",
                        help="do not build: serve the built book on http://127.0.0.1:PORT/ until Ctrl+C")
    args = parser.parse_args()
    if args.serve is None:
        build(args.root.resolve())
    else:
        with serve(args.root.resolve() / "_build" / "html", args.serve) as url:
            print(f"book: serving {url}/intro.html (Ctrl+C to stop)")
            with contextlib.suppress(KeyboardInterrupt):
                threading.Event().wait()
