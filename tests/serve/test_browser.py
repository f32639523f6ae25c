"""The page in a real headless Chromium (the system's /usr/bin/chromium driven by Playwright; nothing
is downloaded): typing, pasting and deleting in the meter, paging and jumping in the explorer,
browsing the prefix tree; what the page shows equals the library's answers. These tests must run
wherever the suite runs (CI installs chromium): a missing browser is a failure, not a skip.

The meter's screenshot in the docs (docs/serve-meter.png) is written by this test when
ARENUM_UPDATE_SCREENSHOT=1; otherwise it goes to a temporary folder.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright

from arenum.cli.demo import demo_model_path
from arenum.models.ngram import NGramModel

CHROMIUM = "/usr/bin/chromium"
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def browser():
    assert os.path.exists(CHROMIUM), f"{CHROMIUM} is missing: apt-get install chromium (.ci/run does)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser, demo_server):
    # bypass_csp: the test's own wait_for_function needs eval, which the page's CSP forbids
    ctx = browser.new_context(viewport={"width": 900, "height": 1200}, bypass_csp=True)
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(demo_server.url + "/")
    pg.wait_for_selector("body[data-ready='1']", timeout=20_000)
    yield pg
    ctx.close()
    assert not errors, errors


@pytest.fixture(scope="module")
def lib(demo_store):
    m = NGramModel.load(demo_model_path())
    probe = m.enumerable(store=demo_store, store_readonly=True)
    held = probe.stats["tree_prefixes"]
    probe.close()
    e = m.enumerable(store=demo_store, store_readonly=True, max_prefixes=held)
    yield m, e
    e.close()


def wait_ranked(pg, rank_not: str | None = None) -> None:
    pg.wait_for_function("(r) => { const e = document.querySelector('#result');"
                         " return e.dataset.state === 'ranked' && e.dataset.rank !== r; }", arg=rank_not or "",
                         timeout=20_000)


def test_the_meter_shows_the_librarys_guess_number(page, lib):
    m, e = lib
    page.click("#password")
    page.keyboard.type("monkey", delay=30)  # one key at a time, as a person types
    wait_ranked(page)
    want = e.rank(m.encode("monkey"))
    assert want.exact
    assert page.get_attribute("#result", "data-rank") == str(want.rank)
    assert page.get_attribute("#result", "data-method") == "exact"
    assert f"guess number {want.rank + 1:,}" in page.inner_text("#verdict")
    assert page.inner_text("#guess-number") == f"{want.rank + 1:,}"
    assert page.inner_text("#bits").startswith(f"{-want.log_prob / 0.6931471805599453:.3f}")
    steps = page.query_selector_all("#steps .step")
    assert len(steps) == len(m.encode("monkey"))  # one per character, and the end
    toks = m.encode("monkey")
    for j, el in enumerate(steps):
        ids, lps = e.oracle.table(tuple(toks[:j]))
        lp = float(lps[list(ids).index(toks[j])])
        assert float(el.get_attribute("data-bits")) == pytest.approx(-lp / 0.6931471805599453, rel=1e-12)
    assert page.query_selector("#curve #mark") is not None and page.query_selector("#curve #exact-line") is not None
    shot = DOCS / "serve-meter.png" if os.environ.get("ARENUM_UPDATE_SCREENSHOT") == "1" else None
    if shot is None:
        import tempfile

        shot = Path(tempfile.mkdtemp()) / "serve-meter.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000

    # delete two characters with the keyboard: the meter follows
    page.keyboard.press("Backspace")
    page.keyboard.press("Backspace")
    wait_ranked(page, str(want.rank))
    assert page.input_value("#password") == "monk"
    assert page.get_attribute("#result", "data-rank") == str(e.rank(m.encode("monk")).rank)

    # paste (text inserted at once, no key events), then a password past the built index
    page.fill("#password", "")
    page.keyboard.insert_text("dragon")
    wait_ranked(page, str(e.rank(m.encode("monk")).rank))
    assert page.get_attribute("#result", "data-rank") == str(e.rank(m.encode("dragon")).rank)
    page.fill("#password", "correcthorse")
    page.wait_for_function("document.querySelector('#result').dataset.method === 'bracket'", timeout=20_000)
    text = page.inner_text("#verdict")
    assert text.startswith("Certified: between") and "guesses" in text
    assert int(page.get_attribute("#result", "data-rank-lo")) >= e.exact_head().count  # past the index
    assert page.query_selector("#curve .mark-range") is not None

    # an unknown character: one clear line on the page
    page.fill("#password", "Zebra")
    page.wait_for_selector("#error:not([hidden])", timeout=20_000)
    assert "unknown symbol 'Z'" in page.inner_text("#error")


def test_the_rate_changes_the_time(page, lib):
    page.fill("#password", "password")
    wait_ranked(page)
    page.select_option("#rate", "10")
    slow = page.inner_text("#time")
    page.select_option("#rate", "10000000000")
    fast = page.inner_text("#time")
    m, e = lib
    g = e.rank(m.encode("password")).rank + 1
    assert slow != fast and fast == "less than a second"
    minutes = g / 10 / 60
    assert slow == (f"{minutes:.1f} minutes" if minutes < 10 else f"{round(minutes):,} minutes") or "hours" in slow


def test_the_explorer_pages_and_jumps(page, lib):
    m, e = lib
    page.click("#tab-explorer")
    page.wait_for_selector("#ranks tbody tr")

    def rows():
        return [(int(r.get_attribute("data-rank")), r.query_selector("td.seq").inner_text())
                for r in page.query_selector_all("#ranks tbody tr")]

    def want(start, k=20):
        return [(start + j, m.decode(s[:-1])) for j, (s, _) in enumerate(e.slice(start, k))]

    assert rows() == want(0)
    page.click("#next")
    page.wait_for_function("document.querySelector('#ranks tbody tr').dataset.rank === '20'")
    assert rows() == want(20)
    page.click("#prev")
    page.wait_for_function("document.querySelector('#ranks tbody tr').dataset.rank === '0'")
    page.fill("#jump", "1234")
    page.press("#jump", "Enter")
    page.wait_for_function("document.querySelector('#ranks tbody tr').dataset.rank === '1234'")
    assert rows() == want(1234)
    assert page.query_selector("#ranks tr.here").get_attribute("data-rank") == "1234"
    page.fill("#jump", "99999999")
    page.click("#go")
    page.wait_for_selector("#explorer-error:not([hidden])")
    assert "past the built index" in page.inner_text("#explorer-error")


def test_neighbours_of_a_password(page, lib):
    m, e = lib
    page.fill("#password", "qwerty")
    wait_ranked(page)
    r = e.rank(m.encode("qwerty")).rank
    page.click("#neighbours-btn")
    page.wait_for_selector("#ranks tr.here")
    here = page.query_selector("#ranks tr.here")
    assert here.get_attribute("data-rank") == str(r) and here.query_selector("td.seq").inner_text() == "qwerty"


def test_the_prefix_tree(page, lib):
    m, e = lib
    page.click("#tab-explorer")
    page.click("#prefix")
    page.keyboard.type("pa", delay=30)
    page.wait_for_function("document.querySelector('#prefix-info').textContent.includes(\"'pa'\")")
    ids, lps = e.oracle.table(tuple(m.encode("pa", eos=False)))
    first = page.query_selector("#children tbody tr")
    label = m.decode([int(ids[0])]) if int(ids[0]) != m.eos else ""
    assert first.get_attribute("data-text") == label
    shown = [r.get_attribute("data-text") for r in page.query_selector_all("#children tbody tr")]
    assert len(shown) == min(100, len(ids))
    first.click()
    page.wait_for_function("(v) => document.querySelector('#prefix-info').textContent.includes(v)",
                           arg="'pa" + label + "'")
    assert page.input_value("#prefix") == "pa" + label
    page.click("#up")
    page.wait_for_function("document.querySelector('#prefix-info').textContent.includes(\"'pa'\")")


def test_the_page_says_which_policy_it_answers_under(browser, policy_server, policy_store):
    from arenum.constraints import build

    ctx = browser.new_context(viewport={"width": 900, "height": 1200}, bypass_csp=True)
    try:
        pg = ctx.new_page()
        pg.goto(policy_server.url + "/")
        pg.wait_for_selector("body[data-ready='1']", timeout=20_000)
        assert "constraint basic8" in pg.inner_text("#constraint-line") and pg.is_visible("#constraint-line")
        m = NGramModel.load(demo_model_path())
        e = m.enumerable(store=policy_store, store_readonly=True, constraint=build(policy="basic8"))
        pg.click("#password")
        pg.keyboard.type("password1", delay=20)
        wait_ranked(pg)
        assert pg.get_attribute("#result", "data-rank") == str(e.rank(m.encode("password1")).rank)
        e.close()
        pg.fill("#password", "dragon")  # 6 characters: the policy does not count it
        pg.wait_for_selector("#error:not([hidden])", timeout=20_000)
        assert "constraint basic8" in pg.inner_text("#error")
        assert "Not counted under the constraint basic8" in pg.inner_text("#verdict")
    finally:
        ctx.close()
