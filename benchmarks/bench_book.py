"""The book: build timings, and the weight of each page as a browser loads it.

Build timings: a cold build from a clean tree, then a rebuild after a prose edit. The tree
is the repository's tracked files copied to a temporary folder (so the real _build and its
cache are untouched). Goals (issue: the book): cold build at most 5 minutes on a 2-core
machine, and a rebuild after editing one chapter's prose at most 30 s.

Page weight: every page of that build opened in headless Chromium (the browser tests' own,
/usr/bin/chromium) from a local server, with every response counted by kind: the page's
HTML, scripts, style sheets, fonts, images and anything else it fetches, in kB (1000 bytes)
as stored on disk. "gzip" is the total a server that compresses sends: the build writes a
``.gz`` copy beside each large text file, which ``tools/build_book.py``'s ``serve`` (the
browser tests' server) sends to a browser that accepts gzip; a file without a copy is
counted compressed on the fly, as a compressing server would send it. The goal: no page
sends more than 3 MB (the browser tests hold the book to it).

Run alone for the weight of the current build only:
``python benchmarks/bench_book.py --weight [--html _build/html] [page ...]``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import build_book  # noqa: E402  (tools/ is not a package)

COLD_GOAL_S = 300.0
PROSE_GOAL_S = 30.0
WEIGHT_GOAL_KB = 3000.0  # sent (gzip)
CHROMIUM = "/usr/bin/chromium"
KINDS = {"document": "html", "script": "js", "stylesheet": "css", "font": "fonts", "image": "images"}
COLUMNS = ["html", "js", "css", "fonts", "images", "other"]


def _tracked_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line and (ROOT / line).is_file()]


def _build(tree: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "tools/build_book.py"], cwd=tree, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def _edit_prose(tree: Path) -> str:
    """Append a sentence to the first markdown cell of the first chapter."""
    chapter = sorted((tree / "chapters").glob("*.ipynb"))[0]
    nb = json.loads(chapter.read_text())
    cell = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    cell["source"] = source + "\n\nThis sentence was added to time a prose-only rebuild."
    chapter.write_text(json.dumps(nb, indent=1))
    return chapter.name


# ---------------------------------------------------------------- page weight


def book_pages(html: Path) -> list[str]:
    """Every page of a built book a reader opens (not the redirect, index or search pages)."""
    pages = [p.relative_to(html).as_posix() for p in html.rglob("*.html")]
    skip = {"index.html", "genindex.html", "search.html", "prf-prf.html"}
    return sorted(p for p in pages if p not in skip and not p.startswith(("_", "reports/")))


def _stored_size(html: Path, url_path: str, body: bytes | None) -> tuple[int, int]:
    """(bytes as stored, bytes a compressing server sends) of one response."""
    from urllib.parse import unquote

    local = html / unquote(url_path.lstrip("/"))
    if local.is_file():
        raw = local.read_bytes()
        gz = local.with_name(local.name + ".gz")
        return len(raw), gz.stat().st_size if gz.is_file() else len(gzip.compress(raw, 9))
    body = body or b""
    return len(body), len(gzip.compress(body, 9))


def page_weight(html: Path, pages: list[str] | None = None) -> list[dict]:
    """Load each page in headless Chromium and add up what it loads, by kind, in kB."""
    from urllib.parse import urlsplit

    from playwright.sync_api import sync_playwright

    pages = pages or book_pages(html)
    rows = []
    with build_book.serve(html) as base, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        for page_path in pages:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            seen: dict[str, tuple[str, int, int]] = {}

            def record(response, seen=seen):
                parts = urlsplit(response.url)
                if parts.scheme not in {"http", "https"} or response.status >= 300:
                    return
                try:
                    body = response.body()
                except Exception:  # a response the browser dropped (navigated away)
                    body = b""
                kind = KINDS.get(response.request.resource_type, "other")
                seen[parts.path] = (kind, *_stored_size(html, parts.path, body))

            page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base)
                       else route.abort())  # the book reads offline: nothing else is fetched
            page.on("response", record)
            page.goto(f"{base}/{page_path}", wait_until="networkidle")
            page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
            # what a reader scrolling through loads too: the fonts of the typeset maths and of
            # the widgets, once drawn
            page.evaluate("async () => { for (const w of document.querySelectorAll('.precomputed-interact'))"
                          " { w.scrollIntoView(); await new Promise(r => setTimeout(r, 50)); }"
                          " await document.fonts.ready; }")
            page.wait_for_load_state("networkidle")
            page.wait_for_timeout(500)
            context.close()
            row = {"page": page_path} | {column: 0.0 for column in COLUMNS}
            for kind, stored, _ in seen.values():
                row[kind] += stored / 1000
            row["total"] = sum(row[c] for c in COLUMNS)
            row["gzip"] = sum(sent for _, _, sent in seen.values()) / 1000
            row["files"] = len(seen)
            rows.append({k: round(v) if isinstance(v, float) else v for k, v in row.items()})
        browser.close()
    return rows


def run() -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "book"
        for name in _tracked_files():
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target)
        widgets = ROOT / "_book_static" / "widgets"
        if widgets.exists():  # fetched from the npm registry once; not part of the timing
            shutil.copytree(widgets, tree / "_book_static" / "widgets")
        cold = _build(tree)
        weights = page_weight(tree / "_build" / "html")
        edited = _edit_prose(tree)
        warm = _build(tree)
    rows = [
        {"benchmark": "book: cold build", "seconds": round(cold, 1), "goal_s": COLD_GOAL_S,
         "met": cold <= COLD_GOAL_S},
        {"benchmark": f"book: rebuild after a prose edit ({edited})", "seconds": round(warm, 1),
         "goal_s": PROSE_GOAL_S, "met": warm <= PROSE_GOAL_S},
    ]
    for row in weights:
        rows.append({"benchmark": f"page weight kB: {row.pop('page')}", **row, "goal_gzip_kB": WEIGHT_GOAL_KB,
                     "met": row["gzip"] <= WEIGHT_GOAL_KB})
    return rows


def _print(rows: list[dict]) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from run import format_table

    print(format_table(rows))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weight", action="store_true", help="only weigh the pages of an existing build")
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html", help="the built book to weigh")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument("pages", nargs="*", help="pages to weigh (default: every page)")
    args = parser.parse_args()
    result = page_weight(args.html.resolve(), args.pages or None) if args.weight else run()
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    _print(result)
