"""The chat page served at GET / (src/server/webpage.html, compiled into the
binary as src/server/webpage.c), driven in headless Chromium with Selenium:
loading state, type a message, see streamed text appear, press stop.

src/server/webpage.c is generated from webpage.html by this file:
    .venv/bin/python tests/python/test_webpage.py --write
and test_webpage_c_is_current fails when someone edits one without the other."""
import pathlib
import shutil
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HTML = ROOT / "src" / "server" / "webpage.html"
CSRC = ROOT / "src" / "server" / "webpage.c"


def render_c(html: str) -> str:
    out = ["/* The chat page served at GET / (generated from webpage.html by",
           " * tests/python/test_webpage.py --write; edit the .html, not this file).",
           " * Self-contained: no CDN, works offline. */",
           "#include <stddef.h>", "", "const char rl_srv_webpage[] ="]
    for line in html.splitlines():
        e = line.replace("\\", "\\\\").replace('"', '\\"').replace("?", "\\?")
        assert all(32 <= ord(ch) < 127 for ch in e), f"non-ASCII or control character in webpage.html: {line!r}"
        out.append(f'    "{e}\\n"')
    out[-1] += ";"
    out += ["const size_t rl_srv_webpage_len = sizeof rl_srv_webpage - 1;", ""]
    return "\n".join(out)


def test_webpage_c_is_current():
    assert CSRC.read_text() == render_c(HTML.read_text()), \
        "src/server/webpage.c is stale: run .venv/bin/python tests/python/test_webpage.py --write"


def test_page_is_self_contained():
    html = HTML.read_text()
    for bad in ["http://", "https://cdn", "<script src", "<link "]:
        assert bad not in html.replace("(https?:", ""), bad


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    if not chromium or not driver_bin:
        pytest.skip("chromium / chromium-driver not installed (scripts/setup installs them)")
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--no-first-run", "--disable-extensions", "--window-size=1200,900"]:
        opts.add_argument(a)
    d = webdriver.Chrome(service=Service(driver_bin), options=opts)
    try:
        yield d
    finally:
        d.quit()


def _wait(pred, timeout=30, what="condition"):
    t_end = time.time() + timeout
    while time.time() < t_end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_chat_page_streams_and_stops(browser):
    from conftest import model_path
    from selenium.webdriver.common.by import By
    from serverlib import Server
    model_path("smollm2-135m")
    with Server("-c", "1024", env={"REDLINE_TEST_LOAD_DELAY_MS": "2500"}, wait_ready=False) as s:
        browser.get(s.base + "/")
        st = browser.find_element(By.ID, "status")
        _wait(lambda: "loading" in st.text, 10, "loading state")
        assert browser.find_element(By.ID, "send").get_attribute("disabled")
        _wait(lambda: st.text == "ready", 60, "ready state")
        # 1. a short reply streams in completely
        browser.find_element(By.CSS_SELECTOR, "details summary").click()  # open settings
        browser.find_element(By.ID, "max_tokens").clear()
        browser.find_element(By.ID, "max_tokens").send_keys("400")
        inp = browser.find_element(By.ID, "input")
        inp.send_keys("Write a long story about a dragon.")
        browser.find_element(By.ID, "send").click()
        assistant = lambda: browser.find_elements(By.CSS_SELECTOR, ".msg.assistant .body")
        first = _wait(lambda: assistant() and len(assistant()[-1].text) > 0 and assistant()[-1].text, 60,
                      "streamed text")
        # more text keeps arriving (streaming, not one block)
        _wait(lambda: len(assistant()[-1].text) > len(first) + 5, 60, "more streamed text")
        stop = browser.find_element(By.ID, "stop")
        assert stop.is_enabled()
        stop.click()
        _wait(lambda: not browser.find_element(By.ID, "stop").is_enabled(), 10, "stop to take effect")
        frozen = assistant()[-1].text
        time.sleep(1.0)
        assert assistant()[-1].text == frozen, "text kept growing after stop"
        assert not browser.find_elements(By.CSS_SELECTOR, ".error")
        # the server cancelled the request: nothing running afterwards
        _wait(lambda: "redline:num_requests_running{" in (m := s.request("GET", "/metrics")[2])
              and [l for l in m.splitlines() if l.startswith("redline:num_requests_running{")][0].endswith(" 0"),
              5, "request cancelled on the server")
        # the conversation is kept in localStorage across a reload
        browser.refresh()
        _wait(lambda: browser.find_elements(By.CSS_SELECTOR, ".msg.user"), 10, "conversation restored")
        # an error is shown readably (a prompt longer than the context)
        _wait(lambda: browser.find_element(By.ID, "status").text == "ready", 20, "ready after reload")
        inp = browser.find_element(By.ID, "input")
        browser.execute_script("arguments[0].value = 'word '.repeat(3000);", inp)
        browser.find_element(By.ID, "send").click()
        err = _wait(lambda: browser.find_elements(By.CSS_SELECTOR, ".error"), 30, "error message")
        assert "400" in err[0].text and "context" in err[0].text


if __name__ == "__main__":
    if "--write" in sys.argv:
        CSRC.write_text(render_c(HTML.read_text()))
        print(f"wrote {CSRC}")
