#!/usr/bin/env python3
"""Drive kbdb serve's web page in a real headless Chromium (Playwright for Python).

Called by tests/web.rs (`the_page_works_in_a_real_browser`) with a fresh server's one-time
sign-in link. The flow: sign in with the link, search as you type and on Enter, open a result,
follow a reference, reload and stay signed in, read a hostile section (its <script> and
<img onerror> show as text, no dialog opens), and no console error anywhere. With
--screenshots DIR it also saves one screenshot per view (docs/web/*.png).
"""
import argparse
import os
import sys
from urllib.parse import urlsplit

from playwright.sync_api import sync_playwright, expect

ap = argparse.ArgumentParser()
ap.add_argument("--chromium", required=True)
ap.add_argument("--link", required=True, help="the sign-in link kbdb serve printed")
ap.add_argument("--hostile", required=True, help="kbid of the section with hostile content")
ap.add_argument("--screenshots", default="", help="a folder for one screenshot per view")
args = ap.parse_args()

parts = urlsplit(args.link)
base = f"{parts.scheme}://{parts.netloc}"
problems = []


def check(cond, what):
    if not cond:
        problems.append(what)
        print("FAIL:", what, flush=True)


with sync_playwright() as p:
    browser = p.chromium.launch(
        executable_path=args.chromium,
        headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
    )
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    page = context.new_page()
    console_errors = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(f"page error: {e}"))
    dialogs = []

    def on_dialog(d):
        dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", on_dialog)

    def shot(name):
        if args.screenshots:
            os.makedirs(args.screenshots, exist_ok=True)
            page.screenshot(path=os.path.join(args.screenshots, f"{name}.png"), full_page=True)

    # 1. Sign in with the link: the page lands on / without the token in the URL.
    page.goto(args.link)
    check(page.url.rstrip("/") == base, f"after sign-in the URL is {page.url}, not {base}/")
    expect(page.get_by_role("heading", name="Recent changes")).to_be_visible()
    cookies = context.cookies()
    session = [c for c in cookies if c["name"].startswith("kbdb_session_")]
    check(len(session) == 1, f"one session cookie, got {cookies}")
    if session:
        check(session[0]["httpOnly"], "the session cookie is HttpOnly")
        check(session[0]["sameSite"] == "Strict", f"SameSite {session[0]['sameSite']}")
    check(page.evaluate("document.cookie") == "", "scripts cannot read the session cookie")
    shot("home")

    # 2. Search as you type: the results replace the recent changes without a page load.
    page.fill("#q", "postgres")
    expect(page.locator("#results mark").first).to_be_visible(timeout=10_000)
    check("/search?" in page.url, f"typing updates the address: {page.url}")
    # ... and on Enter.
    page.fill("#q", "careful")
    page.press("#q", "Enter")
    page.wait_for_url("**/search?**q=careful**")
    expect(page.locator("ol.results a", has_text="Hostile note")).to_be_visible()
    page.fill("#q", "postgres")
    page.press("#q", "Enter")
    page.wait_for_url("**/search?**q=postgres**")
    expect(page.locator("ol.results mark").first).to_have_text("Postgres")
    shot("search")

    # 3. Open a result.
    page.locator("ol.results a", has_text="Decision").first.click()
    page.wait_for_url("**/section/**")
    expect(page.locator("h1")).to_have_text("Decision")
    expect(page.locator("svg.graph")).to_be_visible()
    expect(page.locator("pre code span.k").first).to_be_visible()
    shot("section")

    # 4. The hostile section: its tags show as text, no dialog opens.
    page.goto(f"{base}/section/{args.hostile}")
    content = page.locator("div.content").inner_text()
    check("<script>alert('xss')</script>" in content, f"the <script> shows as text: {content!r}")
    check("<img src=x onerror=alert(1)>" in content, f"the <img onerror> shows as text: {content!r}")
    check(page.locator("div.content img").count() == 0, "no image element from the hostile text")
    check(page.locator("div.content script").count() == 0, "no script element from the hostile text")
    check(page.locator("a[href^='javascript']").count() == 0, "no javascript: link")

    # 5. Follow a reference.
    page.locator("#references a", has_text="ADR 7").first.click()
    page.wait_for_url("**/doc/adr/7")
    expect(page.locator("main > h1")).to_have_text("ADR 7: Postgres")
    shot("document")

    # 6. Reload: still signed in.
    page.reload()
    expect(page.locator("main > h1")).to_have_text("ADR 7: Postgres")
    check("Sign in" not in page.locator("main").inner_text(), "still signed in after reload")

    # 7. Every other view opens, and the neighbourhood graph is a link to click through.
    for path, name, heading in [
        ("/docs", "documents", "Documents"),
        ("/tags", "tags", "Tags"),
        ("/collections", "collections", "Collections"),
        ("/validation", "validation", "Validation"),
        ("/status", "status", "Status"),
    ]:
        page.goto(base + path)
        expect(page.locator("h1")).to_have_text(heading)
        shot(name)
    with page.expect_navigation():
        page.get_by_role("button", name="Run the check").click()
    check(page.url.endswith("/status"), f"the check answers with the status page: {page.url} {page.locator('main').inner_text()[:300]!r}")
    expect(page.locator("#check-result")).to_contain_text("ok")
    shot("status")
    page.goto(f"{base}/section/{args.hostile}?depth=2")
    page.locator("svg.graph a").first.click()
    page.wait_for_load_state()
    check(page.locator("main > h1").count() == 1, f"a graph node opens a view: {page.url}")

    # 8. A browser without the session sees the sign-in page and no knowledge.
    other = browser.new_context()
    anon = other.new_page()
    anon.goto(base + "/")
    text = anon.locator("body").inner_text()
    check("Sign in" in text and "Postgres" not in text, f"no session, no knowledge: {text!r}")
    if args.screenshots:
        anon.screenshot(path=os.path.join(args.screenshots, "sign-in.png"))
    other.close()

    check(not dialogs, f"no dialog opened: {dialogs}")
    check(not console_errors, f"no console errors: {console_errors}")
    browser.close()

if problems:
    print(f"{len(problems)} problem(s)", flush=True)
    sys.exit(1)
print("ok: the browser flow passed", flush=True)
