"""The built HTML book, read in a real browser (headless Chromium driven by Playwright).

Every request to a host other than the local server is blocked and counted: the book
must read offline. Run `make book` first (`make test` does); `make test` also installs
Debian's chromium when it is missing (tools/ensure_command.sh chromium chromium).

The server is the build script's own (``tools/build_book.py``'s ``serve``): it sends the
build's gzip copies of large files, as a static host that serves pre-compressed files does.
Besides loading, maths, widgets and solutions, the tests hold the book to what a reader sees:
no page wider than a phone (390 px); at 1280 px no code block, output or display equation
wider than the content column; every figure shown at 85% or more of the size it was drawn
at; no red or unfinished progress bar; solutions printed open; one search box, and search
that finds what a chapter teaches rather than its plotting code; pages that load only what
they use. Screenshots of four chapters at both widths land in ``test-artifacts/``.

Every page is opened once at each width (the module fixtures ``desktop_pages`` and ``phone_pages``),
and most checks read what was recorded there. `make test` runs the checks at a phone's width
(marked ``phone``) and the others in two processes at once: most of a page's time is waiting on it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

pytestmark = pytest.mark.book

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
SKIP_PAGES = {"genindex.html", "search.html", "index.html"}  # index.html: a redirect to intro.html
MATH_PAGES = ["chapters/07_positional_encoding.html", "chapters/08_rotation_proof.html"]
PROOF_PAGE = "chapters/08_rotation_proof.html"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}
SCREENSHOT_CHAPTERS = ["04", "08", "11", "14"]
MIN_FIGURE_SCALE = 0.85  # a figure shown smaller than this share of its drawn size has tiny labels
# The most a page may cost a reader, in bytes sent (HTML, scripts, style sheets, fonts, images,
# from the build's gzip copies where it has them): about 2.5 MB for a widget chapter, of which
# the widget manager is 0.9 MB (benchmarks/bench_book.py --weight gives the full table).
PAGE_BUDGET = 3_000_000
# Never loaded: Font Awesome's script (the theme's CSS draws the icons), MathJax's
# all-in-one bundle and its menu (pages load the components they use).
NEVER_LOADED = ["/_static/scripts/fontawesome.js", "/_static/mathjax/tex-chtml.js", "/_static/mathjax/ui/"]

_spec = importlib.util.spec_from_file_location("build_book", ROOT / "tools" / "build_book.py")
build_book = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build_book)


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
    with build_book.serve(HTML) as url:
        yield url


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
    """One page opened in a fresh browser context, with its errors, blocked requests and what it loaded."""

    def __init__(self, browser, server: str, page_path: str, viewport: dict | None = None):
        self.context = browser.new_context(viewport=viewport or DESKTOP)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.blocked: list[str] = []
        self.failed: list[str] = []
        self.loaded: dict[str, str] = {}  # URL path -> resource type
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
        self.page.on("response", lambda r: self.loaded.setdefault(urlsplit(r.url).path, r.request.resource_type))
        self.page.goto(f"{server}/{page_path}", wait_until="networkidle")
        self.page.wait_for_function("() => !window.MathJax || !MathJax.startup || MathJax.startup.promise")
        self.page.evaluate("() => window.MathJax && MathJax.startup ? MathJax.startup.promise : null")
        self.page.wait_for_timeout(300)

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser, server):
    opened: list[Visit] = []

    def open_page(page_path: str, viewport: dict | None = None) -> Visit:
        v = Visit(browser, server, page_path, viewport)
        opened.append(v)
        return v

    yield open_page
    for v in opened:
        v.close()


@pytest.fixture(scope="module")
def desktop_pages(browser, server) -> dict[str, dict]:
    """Every page of the book (and the search page) opened once at 1280 px, with what the tests below
    read off it, in this order: its errors, what it loaded and sent, its code and outputs as first
    laid out; with every widget scrolled into view, its figures and progress bars; each widget's
    answer to a moved control; and, last, the page in print media."""
    seen = {}
    _forget_screenshots(DESKTOP)
    for page_path in book_pages() + ["search.html"]:
        v = Visit(browser, server, page_path)
        images = v.page.evaluate(
            "() => Array.from(document.images).map(i => [i.currentSrc || i.src, i.complete, i.naturalWidth])"
        )
        # a TeX error, or a macro MathJax does not know (its "noundefined" package shows it in red)
        tex_errors = v.page.evaluate("() => Array.from(document.querySelectorAll("
                                     "'mjx-merror, mjx-container [style*=\"color: red\"]'))"
                                     ".map(e => e.getAttribute('data-mjx-error') || 'a macro MathJax does not know')")
        sent = v.page.evaluate("() => performance.getEntriesByType('navigation')"
                               ".concat(performance.getEntriesByType('resource'))"
                               ".reduce((total, e) => total + e.transferSize, 0)")
        record = {"image not loaded": [src[:80] for src, complete, width in images if not (complete and width > 0)],
                  "TeX error": tex_errors, "loaded": dict(v.loaded), "sent": sent,
                  "too wide": v.page.evaluate(_TOO_WIDE)}
        _show_widgets(v)
        _screenshot_if_chosen(v, page_path, DESKTOP)
        record["shrunk"] = v.page.evaluate(_SHRUNK_FIGURES, MIN_FIGURE_SCALE)
        record["progress"] = v.page.evaluate(_PROGRESS)
        record["widgets"] = v.page.locator(".precomputed-interact").count()
        record["dead widgets"] = _dead_widgets(v)
        record["print"] = _not_printed_right(v)
        record.update({"JavaScript error": list(v.errors), "blocked request": list(v.blocked),
                       "failed request": list(v.failed)})
        v.close()
        seen[page_path] = record
    return seen


def test_every_page_loads_offline_without_errors(desktop_pages):
    problems = []
    assert len(desktop_pages) >= 3
    for page_path, seen in desktop_pages.items():
        for kind in ("JavaScript error", "blocked request", "failed request", "image not loaded", "TeX error"):
            problems += [f"{page_path}: {kind}: {item}" for item in seen[kind]]
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


def _dead_widgets(v: Visit) -> list[str]:
    """Move each precomputed widget's first control; name those whose shown output did not change."""
    dead = []
    for i, box in enumerate(v.page.locator(".precomputed-interact").all()):
        box.scroll_into_view_if_needed()
        before = _shown_output(v, box)
        _move_first_control(v, box)
        v.page.wait_for_timeout(150)
        after = _shown_output(v, box)
        if not before or before == after:
            dead.append(f"widget {i + 1} did not change what it shows")
    return dead


def test_widgets_respond_without_a_kernel(desktop_pages):
    pages = [p for p in book_pages() if "precomputed-interact" in (HTML / p).read_text(encoding="utf-8")]
    assert pages, "no page of the book has a precomputed widget"
    dead = []
    for page_path in pages:
        assert desktop_pages[page_path]["widgets"], f"{page_path}: widget state present but no widget rendered"
        dead += [f"{page_path}: {item}" for item in desktop_pages[page_path]["dead widgets"]]
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


# ---------------------------------------------------------------- what a reader sees (issue 18)

# Elements that stick out of the right edge of the window and are not inside a box that
# scrolls or clips them: what makes a page scroll sideways. The outermost of each is named.
_SIDEWAYS = """() => {
  const width = document.documentElement.clientWidth;
  const clipped = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== "visible") return true;
    }
    return false;
  };
  const out = new Set(), named = [];
  for (const el of document.body.querySelectorAll("*")) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > width + 1 && getComputedStyle(el).position !== "fixed" && !clipped(el)) {
      out.add(el);
      if (!out.has(el.parentElement)) {
        named.push(`${el.tagName.toLowerCase()}.${String(el.className).trim().split(/\\s+/).join(".")} `
                   + `(${Math.round(r.left)}-${Math.round(r.right)} px): `
                   + JSON.stringify((el.textContent || el.getAttribute("src") || "").trim().slice(0, 50)));
      }
    }
  }
  return {scrollWidth: document.scrollingElement.scrollWidth, width, named};
}"""

# Code blocks, outputs and display equations wider than the box that shows them (so cut off
# or scrolled sideways), with their first characters (an equation's TeX source).
_TOO_WIDE = """() => {
  const article = document.querySelector("article.bd-article") || document.body;
  // not inside a closed <details> (hidden plotting code) nor otherwise hidden
  const shown = (el) => el.checkVisibility() && el.clientWidth > 0;
  const start = (text) => JSON.stringify((text || "").trim().replace(/\\s+/g, " ").slice(0, 60));
  const tex = new Map();
  if (window.MathJax && MathJax.startup && MathJax.startup.document) {
    for (const item of MathJax.startup.document.math) tex.set(item.typesetRoot, item.math);
  }
  const wide = [];
  const check = (el, kind, text) => {
    if (shown(el) && el.scrollWidth > el.clientWidth + 1) {
      wide.push(`${kind} ${el.scrollWidth} px in ${el.clientWidth} px: ${start(text)}`);
    }
  };
  for (const pre of article.querySelectorAll("pre")) {
    check(pre, pre.closest(".cell_output") ? "output" : "code", pre.textContent);
  }
  for (const out of article.querySelectorAll(".cell_output > .output:not(:has(pre))")) {
    check(out, "output", out.textContent);
  }
  for (const eq of article.querySelectorAll('mjx-container[display="true"]')) {
    check(eq, "equation", tex.get(eq) || eq.textContent);
  }
  return wide;
}"""

# Images in the content (static figures and the frame a widget shows) drawn bigger than they
# are shown: their labels shrink with them.
_SHRUNK_FIGURES = """(minimum) => {
  const article = document.querySelector("article.bd-article") || document.body;
  const shrunk = [];
  for (const img of article.querySelectorAll("img")) {
    if (!img.checkVisibility() || !img.naturalWidth) continue;
    const scale = img.clientWidth / img.naturalWidth;
    if (scale < minimum) {
      const where = img.closest(".precomputed-interact") ? "widget image" : "figure";
      const alt = (img.getAttribute("alt") || "").replace(/^.*\\//, "").slice(0, 20);
      shrunk.push(`${where} ${alt} drawn ${img.naturalWidth} px wide, shown at ${img.clientWidth} px `
                  + `(${Math.round(100 * scale)}%)`);
    }
  }
  return shrunk;
}"""

# Progress bars (tqdm in a notebook is an ipywidgets bar, or text): red, or short of their total.
_PROGRESS = r"""() => {
  const bad = [];
  for (const script of document.querySelectorAll('script[type="application/vnd.jupyter.widget-state+json"]')) {
    const models = JSON.parse(script.textContent).state || {};
    for (const [id, model] of Object.entries(models)) {
      const s = model.state || {};
      if (!/ProgressModel$/.test(s._model_name || model.model_name || "")) continue;
      if (s.bar_style === "danger") bad.push(`progress bar ${id.slice(0, 8)} is red (bar_style danger)`);
      if (s.value < s.max) bad.push(`progress bar ${id.slice(0, 8)} stopped at ${s.value}/${s.max}`);
    }
  }
  for (const bar of document.querySelectorAll("article progress")) {
    if (bar.value < bar.max) bad.push(`<progress> stopped at ${bar.value}/${bar.max}`);
  }
  const text = (document.querySelector("article") || document.body).innerText;
  for (const m of text.matchAll(/(\d+)%\|[^|\n]*\|\s*(\d+)\/(\d+)/g)) {
    if (Number(m[2]) < Number(m[3])) bad.push(`text progress bar stopped at ${m[0].slice(0, 40)}`);
  }
  return bad;
}"""


@functools.cache
def _chapter(number: str) -> str:
    matches = [p for p in book_pages() if p.startswith(f"chapters/{number}_")]
    assert matches, f"no chapter {number} in the book"
    return matches[0]


def _show_widgets(v: Visit) -> None:
    """Scroll every widget into view, so its frame is laid out (lazy images, fonts)."""
    for box in v.page.locator(".precomputed-interact").all():
        box.scroll_into_view_if_needed()
    v.page.wait_for_timeout(200)


def _forget_screenshots(viewport: dict) -> None:
    """Delete the screenshots an earlier run left at this width, so each one checked was taken now."""
    for old in ARTIFACTS.glob(f"*-{viewport['width']}.png"):
        old.unlink()


def _screenshot_path(page_path: str, viewport: dict) -> Path:
    """Where the screenshot of a page at a viewport's width goes: test-artifacts/NN_name-WIDTH.png."""
    return ARTIFACTS / f"{Path(page_path).stem}-{viewport['width']}.png"


def _screenshot_if_chosen(v: Visit, page_path: str, viewport: dict) -> None:
    """A full-page screenshot, to look at, of the chapters in SCREENSHOT_CHAPTERS: test-artifacts/NN_name-WIDTH.png."""
    if not any(page_path == _chapter(number) for number in SCREENSHOT_CHAPTERS):
        return
    ARTIFACTS.mkdir(exist_ok=True)
    v.page.evaluate("() => window.scrollTo(0, 0)")
    v.page.screenshot(path=str(_screenshot_path(page_path, viewport)), full_page=True)


@pytest.fixture(scope="module")
def phone_pages(browser, server) -> dict[str, dict]:
    """Every page opened once at 390 px, with every widget scrolled into view: how wide it lays out, and what
    sticks out."""
    seen = {}
    _forget_screenshots(PHONE)
    for page_path in book_pages():
        v = Visit(browser, server, page_path, PHONE)
        _show_widgets(v)
        _screenshot_if_chosen(v, page_path, PHONE)
        seen[page_path] = v.page.evaluate(_SIDEWAYS)
        v.close()
    return seen


@pytest.mark.phone
def test_no_page_wider_than_a_phone(phone_pages):
    wide = [f"{page_path}: {result['scrollWidth']} px wide at {PHONE['width']} px; sticking out:\n    "
            + "\n    ".join(result["named"] or ["(nothing named)"])
            for page_path, result in phone_pages.items() if result["scrollWidth"] > PHONE["width"]]
    assert not wide, "pages wider than a phone's screen:\n" + "\n".join(wide)


def test_code_outputs_and_equations_fit_the_column(desktop_pages):
    wide = [f"{page_path}: {item}" for page_path in book_pages() for item in desktop_pages[page_path]["too wide"]]
    assert not wide, (f"{len(wide)} code blocks, outputs or display equations wider than the column "
                      "at 1280 px (cut off or scrolled sideways):\n" + "\n".join(wide))


def test_figures_are_shown_near_the_size_they_were_drawn(desktop_pages):
    shrunk = [f"{page_path}: {item}" for page_path in book_pages() for item in desktop_pages[page_path]["shrunk"]]
    assert not shrunk, (f"{len(shrunk)} figures shown at less than {MIN_FIGURE_SCALE:.0%} of the size they were "
                        "drawn at (their labels shrink with them; draw them for the ~670 px column):\n"
                        + "\n".join(shrunk))


def test_no_red_or_unfinished_progress_bar(desktop_pages):
    bad = [f"{page_path}: {item}" for page_path in book_pages() for item in desktop_pages[page_path]["progress"]]
    assert not bad, "progress bars that read as a crash or an unfinished run:\n" + "\n".join(bad)


def _not_printed_right(v: Visit) -> list[str]:
    """In print media: solutions not printed open or printed with their toggle, and widget controls,
    widget code cells and collapsed code that are printed."""
    v.page.emulate_media(media="print")
    v.page.wait_for_timeout(100)
    problems = []
    for i, solution in enumerate(v.page.locator("div.solution").all()):
        body = solution.locator(".admonition-title ~ *")
        if not body.count() or not all(part.is_visible() for part in body.all()):
            problems.append(f"solution {i + 1} is not printed open")
        if solution.locator("button.toggle-button").is_visible():
            problems.append(f"solution {i + 1} prints its toggle button")
    for kind, selector in (("widget controls", ".precomputed-controls"),
                           ("widget code cells", ".cell:has(.precomputed-interact) > .cell_input"),
                           ("collapsed code", "details.hide.above-input")):
        shown = [el for el in v.page.locator(selector).all() if el.is_visible()]
        if shown:
            problems.append(f"{len(shown)} {kind} printed")
    return problems


def test_solutions_printed_open_without_controls(desktop_pages):
    pages = [p for p in book_pages() if 'class="solution' in (HTML / p).read_text(encoding="utf-8")]
    assert pages, "no page has an exercise solution"
    problems = [f"{page_path}: {item}" for page_path in book_pages() for item in desktop_pages[page_path]["print"]]
    assert not problems, "\n".join(problems)


def test_one_search_box_and_no_bar_above_the_page(visit, server):
    for viewport in (DESKTOP, PHONE):
        v = visit("intro.html", viewport)
        header = v.page.evaluate("() => { const h = document.querySelector('#pst-header');"
                                 " return h ? h.getBoundingClientRect().height : 0; }")
        assert header == 0, f"a bar {header} px high sits above the page at {viewport['width']} px"
        boxes = [b for b in v.page.locator(".search-button__button").all() if b.is_visible()]
        assert len(boxes) == 1, f"{len(boxes)} search boxes shown at {viewport['width']} px"
        boxes[0].click()
        field = v.page.locator("#pst-search-dialog input[name=q]")
        field.fill("softmax")
        field.press("Enter")
        v.page.wait_for_url("**/search.html?q=softmax*")
        v.page.wait_for_selector("#search-results li", timeout=15_000)
        v.close()


def test_search_finds_what_chapters_teach_not_their_plotting_code(visit):
    """Every page that "rotation" finds says it in its text, not only in hidden plotting code."""
    v = visit("search.html?q=rotation")
    v.page.wait_for_selector("#search-results li", timeout=15_000)
    v.page.wait_for_function("() => !document.querySelector('#search-results').classList.contains('loading')"
                             " && document.querySelector('.search-summary')", timeout=15_000)
    v.page.wait_for_timeout(1500)  # excerpts are fetched page by page
    results = v.page.evaluate("""() => Array.from(document.querySelectorAll('#search-results li')).map(li => ({
        href: li.querySelector('a').getAttribute('href'),
        excerpt: (li.querySelector('.context') || {}).textContent || ''}))""")
    assert results, "searching 'rotation' found nothing"
    found = sorted({unquote(urlsplit(r["href"]).path) for r in results})
    assert any("08_rotation_proof" in page for page in found), found
    only_in_hidden_code = []
    for page in found:
        parser = _TextWithoutHiddenCode()
        parser.feed((HTML / page).read_text(encoding="utf-8"))
        if "rotat" not in " ".join(parser.text).lower():
            only_in_hidden_code.append(page)
    assert not only_in_hidden_code, f"'rotation' finds pages only through hidden plotting code: {only_in_hidden_code}"
    raw_tex = [r["excerpt"][:120] for r in results if re.search(r"\\[a-zA-Z]+|\\[()\[\]]", r["excerpt"])]
    assert not raw_tex, "search excerpts show raw LaTeX:\n" + "\n".join(raw_tex)


class _TextWithoutHiddenCode(HTMLParser):
    """The article's text, less the cells kept out of search (class ``no-search``) and scripts."""

    VOID = {"br", "img", "hr", "meta", "link", "input", "wbr", "source", "col", "area", "base", "embed"}

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.stack: list[bool] = []  # per open element: inside a skipped element?

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        skipped = bool(self.stack and self.stack[-1]) or "no-search" in classes or tag in {"script", "style"}
        self.stack.append(skipped)

    def handle_endtag(self, tag):
        if tag not in self.VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if not (self.stack and self.stack[-1]):
            self.text.append(data)


def test_search_index_leaves_out_hidden_plotting_code():
    """A word that a page has only inside hidden plotting code is not indexed for that page."""
    from sphinx.search.en import SearchEnglish

    index_js = (HTML / "searchindex.js").read_text(encoding="utf-8")
    index = json.loads(index_js[index_js.index("(") + 1: index_js.rindex(")")])
    stem = SearchEnglish({}).stem
    leaks = []
    for doc_id, docname in enumerate(index["docnames"]):
        page = HTML / f"{docname}.html"
        html = page.read_text(encoding="utf-8")
        if "no-search" not in html:
            continue
        hidden, shown = _TextOfHiddenCode(), _TextWithoutHiddenCode()
        hidden.feed(html)
        shown.feed(html)
        shown_words = {stem(w).lower() for w in re.findall(r"\w+", " ".join(shown.text))}
        for word in sorted(set(re.findall(r"[A-Za-z_]{4,}", " ".join(hidden.text)))):
            key = stem(word).lower()
            pages = index["terms"].get(key, [])
            pages = pages if isinstance(pages, list) else [pages]
            if doc_id in pages and key not in shown_words:
                leaks.append(f"{docname}: {word!r}")
    assert not leaks, "words indexed only through hidden plotting code:\n" + "\n".join(leaks[:40])


class _TextOfHiddenCode(_TextWithoutHiddenCode):
    """Only the text inside elements of class ``no-search``."""

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.stack.append(bool(self.stack and self.stack[-1]) or "no-search" in classes)

    def handle_data(self, data):
        if self.stack and self.stack[-1]:
            self.text.append(data)


def test_pages_load_only_what_they_use(desktop_pages):
    heavy, needless = [], []
    for page_path, seen in desktop_pages.items():
        for path in seen["loaded"]:
            if any(path.startswith(p) for p in NEVER_LOADED) or (
                    path.endswith("/searchindex.js") and page_path != "search.html"):
                needless.append(f"{page_path}: {path}")
        if seen["sent"] > PAGE_BUDGET:
            heavy.append(f"{page_path}: {seen['sent'] / 1e6:.1f} MB")
    assert not needless, "pages load what they do not use:\n" + "\n".join(needless)
    assert not heavy, f"pages that send more than {PAGE_BUDGET / 1e6:.0f} MB:\n" + "\n".join(heavy)


def test_large_files_are_sent_compressed(visit):
    v = visit(_chapter("14"))
    sent = v.page.evaluate("""() => performance.getEntriesByType('resource')
        .filter(e => e.name.endsWith('embed-amd.js') || e.name.includes('/mathjax/input/tex.js'))
        .map(e => [e.name, e.transferSize, e.decodedBodySize])""")
    assert sent, "chapter 18 loads neither the widget manager nor MathJax"
    for name, transferred, decoded in sent:
        assert transferred < decoded / 2, f"{name} sent uncompressed: {transferred} of {decoded} bytes"


def _assert_screenshots(viewport: dict) -> None:
    for number in SCREENSHOT_CHAPTERS:
        target = _screenshot_path(_chapter(number), viewport)
        assert target.exists() and target.stat().st_size > 10_000, f"no screenshot {target.name}"


def test_screenshots_at_1280(desktop_pages):
    """Full-page screenshots of four chapters, taken as the pages were opened, to look at."""
    _assert_screenshots(DESKTOP)


@pytest.mark.phone
def test_screenshots_at_390(phone_pages):
    _assert_screenshots(PHONE)
