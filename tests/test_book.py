"""The built HTML book, read in a real browser (headless Chromium driven by Playwright).

Every request to a host other than the local server is blocked and counted: the book
must read offline. Run `make book` first (`make test` does); `make test` also installs
Debian's chromium when it is missing (tools/ensure_command.sh chromium chromium).
"""

from __future__ import annotations

import functools
import http.server
import re
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
SKIP_PAGES = {"genindex.html", "search.html"}
MATH_PAGES = ["chapters/07_positional_encoding.html", "chapters/08_rotation_proof.html"]
PROOF_PAGE = "chapters/08_rotation_proof.html"


def book_pages() -> list[str]:
    if not (HTML / "intro.html").exists():
        pytest.fail("the book is not built: run `make book` first (make test does it)")
    pages = [p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")]
    return sorted(p for p in pages if p not in SKIP_PAGES and not p.startswith(("_", "reports/")))


# ---------------------------------------------------------------- internal links (no browser)


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "a" and "name" in attrs:
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key):
                self.links.append(attrs[key])


@functools.cache
def _parse(path: Path) -> _LinkParser:
    parser = _LinkParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def test_internal_links_resolve():
    broken = []
    for page in book_pages():
        source = HTML / page
        for link in _parse(source).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:", "data:")):
                continue
            target = (source.parent / unquote(parts.path)).resolve() if parts.path else source
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page}: {link} (no file)")
                continue
            if parts.fragment and target.suffix == ".html" and parts.fragment not in _parse(target).ids:
                broken.append(f"{page}: {link} (no anchor #{parts.fragment})")
    assert not broken, "broken internal links:\n" + "\n".join(broken)


# ---------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def server():
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(HTML))
    handler.func.log_message = lambda *args: None  # quiet
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    playwright_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: run tools/ensure_command.sh chromium chromium (make test does)")
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
                  "--no-first-run", "--disable-component-update", "--disable-sync"],
        )
        yield chromium
        chromium.close()


class Visit:
    """One page opened in a fresh browser context, with its errors and blocked requests."""

    def __init__(self, browser, server: str, page_path: str):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.blocked: list[str] = []
        self.failed: list[str] = []
        local = server + "/"

        def route(route_):
            if route_.request.url.startswith(local):
                route_.continue_()
            else:
                self.blocked.append(route_.request.url)
                route_.abort()

        self.page.route("**/*", route)
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        self.page.on("response", lambda r: self.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        self.page.goto(f"{server}/{page_path}", wait_until="networkidle")
        self.page.wait_for_function("() => !window.MathJax || !MathJax.startup || MathJax.startup.promise")
        self.page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
        self.page.wait_for_timeout(300)

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser, server):
    opened: list[Visit] = []

    def open_page(page_path: str) -> Visit:
        v = Visit(browser, server, page_path)
        opened.append(v)
        return v

    yield open_page
    for v in opened:
        v.close()


def test_every_page_loads_offline_without_errors(visit):
    problems = []
    pages = book_pages()
    assert len(pages) >= 3
    for page_path in pages:
        v = visit(page_path)
        images = v.page.evaluate(
            "() => Array.from(document.images).map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth])"
        )
        broken_images = [src[:80] for src, complete, width in images if not (complete and width > 0)]
        for kind, items in (("JavaScript error", v.errors), ("blocked request", v.blocked),
                            ("failed request", v.failed), ("image not loaded", broken_images)):
            problems += [f"{page_path}: {kind}: {item}" for item in items]
        v.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page_path", MATH_PAGES)
def test_maths_is_rendered(visit, page_path):
    v = visit(page_path)
    rendered = v.page.locator("mjx-container").count()
    assert rendered >= 5, f"only {rendered} MathJax elements on {page_path}"
    text = v.page.locator("article").inner_text()
    assert "$$" not in text and "\\frac" not in text, "raw TeX left in the page"
    assert not v.blocked


def test_theorem_and_proof_are_rendered_and_numbered(visit):
    v = visit(PROOF_PAGE)
    theorem = v.page.locator("div.proof.theorem").first
    assert theorem.is_visible()
    title = theorem.locator(".admonition-title").inner_text()
    assert re.search(r"Theorem\s+\d+(\.\d+)*", title), title
    # sphinx-proof gives a proof only the classes "proof admonition"; the theorem's own
    # proof is the first such block after it
    proof = v.page.locator("div.proof.theorem ~ div.proof:not(.theorem, .corollary, .proposition, .lemma)").first
    assert proof.is_visible()
    assert proof.inner_text().lstrip().startswith("Proof"), proof.inner_text()[:80]
    assert v.page.locator("div.proof.theorem mjx-container").count() > 0


def _shown_output(v: Visit, box) -> str:
    """What a precomputed widget currently shows: the visible image's data, or its HTML text."""
    images = [img for img in box.locator("img").all() if img.is_visible()]
    if images:
        return images[0].get_attribute("src") or ""
    html = [h for h in box.locator(".widget-html-content").all() if h.is_visible()]
    return "\n".join(h.inner_html() for h in html[1:] or html)


def _move_first_control(v: Visit, box) -> None:
    """Move the widget's first control to a value other than the one it shows now."""
    slider = box.locator(".noUi-handle, .widget-slider .slider-container [role=slider]")
    if slider.count():
        handle = slider.first
        handle.focus()
        at_end = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
        v.page.keyboard.press("ArrowLeft" if at_end else "ArrowRight")
        return
    toggles = box.locator(".widget-toggle-buttons button")
    if toggles.count() > 1:
        inactive = box.locator(".widget-toggle-buttons button:not(.mod-active)")
        assert inactive.count(), "toggle buttons with no inactive button to click"
        inactive.first.click()
        return
    select = box.locator("select")
    if select.count():
        options = select.first.locator("option").all()
        assert len(options) > 1, "a drop-down with one option cannot change anything"
        current = select.first.evaluate("s => s.selectedIndex")
        select.first.select_option(index=1 if current == 0 else 0)
        return
    raise AssertionError("widget has no slider, toggle buttons or drop-down")


def test_widgets_respond_without_a_kernel(visit):
    pages = [p for p in book_pages() if "precomputed-interact" in (HTML / p).read_text(encoding="utf-8")]
    assert pages, "no page of the book has a precomputed widget"
    dead = []
    for page_path in pages:
        v = visit(page_path)
        boxes = v.page.locator(".precomputed-interact").all()
        assert boxes, f"{page_path}: widget state present but no widget rendered"
        for i, box in enumerate(boxes):
            box.scroll_into_view_if_needed()
            before = _shown_output(v, box)
            _move_first_control(v, box)
            v.page.wait_for_timeout(150)
            after = _shown_output(v, box)
            if not before or before == after:
                dead.append(f"{page_path}: widget {i + 1} did not change what it shows")
        v.close()
    assert not dead, "\n".join(dead)


def test_solution_hidden_until_toggled(visit):
    pages = [p for p in book_pages() if 'class="solution' in (HTML / p).read_text(encoding="utf-8")]
    assert pages, "no page has an exercise solution"
    v = visit(pages[0])
    solution = v.page.locator("div.solution").first
    solution.scroll_into_view_if_needed()
    body = solution.locator(".section, .solution-content, section, p").last
    assert not body.is_visible(), "a solution is visible before its toggle is clicked"
    solution.locator("button.toggle-button").first.click()
    v.page.wait_for_timeout(400)
    assert body.is_visible(), "the solution did not open when its toggle was clicked"


def test_screenshot_of_a_chapter(visit):
    ARTIFACTS.mkdir(exist_ok=True)
    chapters = [p for p in book_pages() if p.startswith("chapters/")]
    assert chapters
    page_path = PROOF_PAGE if PROOF_PAGE in chapters else chapters[0]
    v = visit(page_path)
    target = ARTIFACTS / (Path(page_path).stem + ".png")
    v.page.screenshot(path=str(target), full_page=False)
    assert target.stat().st_size > 10_000
