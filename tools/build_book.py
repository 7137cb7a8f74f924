"""Build the HTML book into _build/html: `make book` runs this.

1. Fetch the ipywidgets embedding scripts (RequireJS and @jupyter-widgets/html-manager) from
   the npm registry once, into _static/widgets/, so the built book serves them itself and
   reads offline (no CDN at read time).
2. Clear Jupyter Book's execution cache when the library has changed since the last build:
   the cache keys on a notebook's own code only, so without this a page could show output
   computed with an older transformer_lib.
3. Run `jupyter-book build` with warnings as errors. A failing cell fails the build; the
   notebook, the cell and its traceback are printed.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "_build"
CACHE = BUILD / ".jupyter_cache"
LIB_STAMP = BUILD / ".library-hash"
WIDGET_DIR = ROOT / "_book_static" / "widgets"
NPM_PACKAGES = {  # package@version -> files to keep (relative to the package), target name
    "requirejs@2.3.8": [("require.js", "require.min.js")],
    # only the AMD bundle and the icon fonts it loads relative to itself (Jupyter Book includes
    # every .js file under _static, so the package's other bundles are left out)
    "@jupyter-widgets/html-manager@1.0.15": [("dist/embed-amd.js", "embed-amd.js"), ("dist", "fonts")],
}


def fetch_widget_scripts() -> None:
    """Download the pinned npm packages' browser files into _static/widgets/ (once)."""
    if (WIDGET_DIR / "embed-amd.js").exists() and (WIDGET_DIR / "require.min.js").exists():
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("book: npm is needed once to fetch the ipywidgets scripts; install Node.js (apt-get install npm)")
    WIDGET_DIR.mkdir(parents=True, exist_ok=True)
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
                            shutil.copy2(font, WIDGET_DIR / font.name)
                else:
                    shutil.copy2(src, WIDGET_DIR / target)
    print(f"book: ipywidgets scripts fetched into {WIDGET_DIR.relative_to(ROOT)}")


def library_hash() -> str:
    digest = hashlib.sha256()
    for path in sorted((ROOT / "transformer_lib").rglob("*.py")):
        digest.update(path.relative_to(ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def invalidate_cache_if_library_changed() -> None:
    current = library_hash()
    previous = LIB_STAMP.read_text().strip() if LIB_STAMP.exists() else None
    if previous != current and CACHE.exists():
        print("book: transformer_lib changed since the last build; re-executing every chapter")
        shutil.rmtree(CACHE)


def report_failures() -> None:
    """Print the saved traceback of every notebook that failed to execute."""
    for log in sorted((BUILD / "html" / "reports").rglob("*.err.log")):
        print(f"\n===== execution failed: {log.relative_to(BUILD / 'html' / 'reports').with_suffix('')} =====")
        print(log.read_text())


def build() -> float:
    fetch_widget_scripts()
    invalidate_cache_if_library_changed()
    shutil.rmtree(BUILD / "html" / "reports", ignore_errors=True)
    start = time.perf_counter()
    result = subprocess.run(
        [str(Path(sys.executable).parent / "jupyter-book"), "build", str(ROOT), "--builder", "html",
         "-W", "-n", "--keep-going"],
        cwd=ROOT,
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        report_failures()
        sys.exit(f"book: build failed after {seconds:.0f} s (warnings count as errors)")
    BUILD.mkdir(exist_ok=True)
    LIB_STAMP.write_text(library_hash())
    print(f"book: built _build/html in {seconds:.1f} s")
    return seconds


if __name__ == "__main__":
    build()
