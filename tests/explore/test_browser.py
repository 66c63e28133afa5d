"""``seqvae explore`` in a real browser: the CLI serves a tiny run and headless Chromium (Debian's
``chromium`` and ``chromium-driver``, driven by Selenium) uses the page as a person would.
Screenshots of each state are saved in the test's tmp dir (``pytest --basetemp DIR`` keeps them
somewhere known). Skipped, with the reason, where the browser or Selenium is not installed."""

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from conftest import HELD_OUT, SMILES

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
MOLECULES = list(dict.fromkeys(SMILES + HELD_OUT))  # 30 molecules the tiny run can encode
WAIT = 30  # seconds a page state may take to appear (2 busy cores)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(tiny_run_dir, tmp_path_factory):
    """``seqvae explore`` in a subprocess, on a copy of the tiny run with a property head
    (logP, QED): (url, path of its log, the process)."""
    from seqvae.property_fit import fit_properties

    folder = tmp_path_factory.mktemp("explore")
    molecules = folder / "molecules.smi"
    molecules.write_text("\n".join(MOLECULES) + "\n")
    run_dir = str(folder / "run")
    shutil.copytree(tiny_run_dir, run_dir)
    fit_properties(run_dir, "logp,qed", data=MOLECULES, limit=0, test=None, epochs=5)
    port = _free_port()
    log_path = folder / "server.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
        + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "seqvae", "explore", run_dir,
                                    "--molecules", str(molecules), "--n", "100",
                                    "--port", str(port)], stdout=log, stderr=subprocess.STDOUT,
                                   env=env)
    deadline = time.monotonic() + 180
    while "open http://" not in log_path.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"seqvae explore did not start:\n{log_path.read_text()}")
        time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/", log_path, process
    process.terminate()
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def browser(server):
    if not (CHROMIUM and DRIVER):
        pytest.skip("no headless Chromium: apt-get install chromium chromium-driver "
                    "(scripts/setup.sh does it where apt-get works)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must not look for downloads
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--window-size=1500,1000", "--use-angle=swiftshader",
                     "--enable-unsafe-swiftshader"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.get(server[0])
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    return tmp_path_factory.mktemp("screenshots")


def _wait(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT, poll_frequency=0.1).until(lambda d: condition(d))
    except Exception:
        pytest.fail(f"the page never showed {what}")


def _cards(driver, container: str):
    return driver.find_elements("css selector", f"#{container} .molecule-card")


def _point_offset(driver, index: int):
    """(dx, dy) of map point ``index`` from the plot's top-left corner, in CSS pixels."""
    return driver.execute_script("""
        const gd = document.querySelector('#map .js-plotly-plot');
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, trace = gd._fullData[0];
        return [xa._offset + xa.l2p(trace.x[arguments[0]]),
                ya._offset + ya.l2p(trace.y[arguments[0]])];""", index)


def _trace_points(driver, name: str) -> int:
    """Points of the map's trace ``name`` as drawn (0 when it has none)."""
    return driver.execute_script("""
        const gd = document.querySelector('#map .js-plotly-plot');
        const trace = (gd._fullData || []).find(t => t.name === arguments[0]);
        return trace && trace.x ? trace.x.length : 0;""", name)


def _point_count(driver):
    return driver.execute_script("""
        const gd = document.querySelector('#map .js-plotly-plot');
        return gd && gd._fullData && gd._fullData.length ? gd._fullData[0].x.length : 0;""")


def test_map_renders_every_molecule(browser, shots):
    _wait(browser, lambda d: _point_count(d) == len(MOLECULES), f"{len(MOLECULES)} map points")
    assert browser.find_elements("css selector", "#map canvas")  # drawn with WebGL
    assert f"{len(MOLECULES)} molecules" in browser.find_element("tag name", "header").text
    browser.save_screenshot(str(shots / "1-map.png"))


def test_hover_and_click_show_the_molecule_and_its_neighbours(browser, shots):
    from selenium.webdriver.common.action_chains import ActionChains

    _wait(browser, lambda d: _point_count(d) == len(MOLECULES), "the map")
    plot = browser.find_element("css selector", "#map .js-plotly-plot")
    index = MOLECULES.index("c1ccccc1")
    dx, dy = _point_offset(browser, index)
    width, height = plot.size["width"], plot.size["height"]
    ActionChains(browser).move_to_element_with_offset(plot, dx - width / 2, dy - height / 2) \
        .pause(0.3).perform()
    tooltip = _wait(browser, lambda d: [e for e in d.find_elements(
        "css selector", "#map-tooltip img") if e.is_displayed()], "the hover drawing")
    assert tooltip[0].get_attribute("src").startswith("data:image/svg+xml")
    browser.save_screenshot(str(shots / "2-hover.png"))
    ActionChains(browser).click().perform()
    _wait(browser, lambda d: len(_cards(d, "neighbours")) == 12, "12 decoded neighbours")
    selected = browser.find_element("id", "selected-card")
    assert "c1ccccc1" in selected.text
    assert selected.find_element("tag name", "img").get_attribute("src").startswith("data:image/svg")
    assert "reconstruction (greedy)" in browser.find_element("id", "reconstruction-card").text
    for card in _cards(browser, "neighbours"):  # validity and similarity under each
        note = card.find_element("class name", "note").text
        assert note == "invalid" or note.startswith("valid"), note
    _wait(browser, lambda d: _trace_points(d, "neighbours") == 12, "the neighbours on the map")
    assert _trace_points(browser, "selected") == 1
    assert _point_count(browser) == len(MOLECULES)  # the map's own points are still there
    browser.save_screenshot(str(shots / "3-clicked.png"))


def test_the_shown_neighbours_export_as_csv(browser, tmp_path):
    browser.execute_cdp_cmd("Page.setDownloadBehavior",
                            {"behavior": "allow", "downloadPath": str(tmp_path)})
    browser.find_element("css selector", "button[id*='neighbours'][id*='csv']").click()
    saved = tmp_path / "neighbours.csv"
    _wait(browser, lambda d: saved.exists() and saved.read_text().count("\n") == 13,
          "neighbours.csv with a header and 12 rows")
    shown = [card.get_attribute("title") for card in _cards(browser, "neighbours")]
    lines = saved.read_text().splitlines()
    assert lines[0] == "smiles,valid,similarity,x,y"
    assert [line.split(",")[0] for line in lines[1:]] == shown


def _interpolate(driver, start: str, end: str):
    from selenium.webdriver.common.keys import Keys

    driver.find_element("id", "tab-interpolate").click()
    for box, text in (("interp-a", start), ("interp-b", end)):
        field = _wait(driver, lambda d: d.find_element("id", box), f"the {box} field")
        field.send_keys(Keys.CONTROL, "a")  # clear() leaves React's value in place
        field.send_keys(Keys.DELETE, text)
    driver.find_element("id", "interp-button").click()


def test_interpolation_between_typed_smiles(browser, shots):
    _interpolate(browser, "CCO", "c1ccccc1")
    _wait(browser, lambda d: len(_cards(d, "strip")) == 8, "8 interpolation steps")
    assert browser.find_element("id", "interp-message").text == ""
    notes = [card.find_element("class name", "note").text for card in _cards(browser, "strip")]
    labels = [card.find_element("class name", "label").text for card in _cards(browser, "strip")]
    assert labels[0] == "t=0.00" and labels[-1] == "t=1.00"
    assert all(note == "invalid" or note.startswith("valid") for note in notes)
    _wait(browser, lambda d: _trace_points(d, "interpolation") == 8, "the path on the map")
    browser.save_screenshot(str(shots / "4-interpolation.png"))


def test_invalid_smiles_shows_an_inline_message(browser, shots):
    _interpolate(browser, "C1CC(", "c1ccccc1")
    message = _wait(browser, lambda d: d.find_element("id", "interp-message").text,
                    "a message about the bad SMILES")
    assert message.startswith("A: cannot use 'C1CC('")
    browser.save_screenshot(str(shots / "5-invalid.png"))


def test_optimisation_from_the_selected_molecule(browser, shots):
    from selenium.webdriver.common.keys import Keys

    browser.find_element("id", "tab-optimise").click()
    field = _wait(browser, lambda d: d.find_element("id", "optimise-steps"), "the steps field")
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys(Keys.DELETE, "6")
    browser.find_element("id", "optimise-button").click()  # from the clicked c1ccccc1
    _wait(browser, lambda d: len(_cards(d, "trajectory")) == 7, "7 trajectory points")
    labels = [card.find_element("class name", "label").text for card in _cards(browser, "trajectory")]
    assert labels[0].startswith("step 0: qed ") and "(pred " in labels[0]  # qed before logp
    assert "qed up, 6 steps: predicted" in browser.find_element("id", "trajectory").text
    _wait(browser, lambda d: _trace_points(d, "optimisation") == 7, "the trajectory on the map")
    browser.save_screenshot(str(shots / "6-optimisation.png"))


def test_conditioned_samples_from_the_scaffold_and_where_boxes(browser, shots):
    from rdkit import Chem
    from selenium.webdriver.common.keys import Keys

    browser.find_element("id", "tab-sample").click()
    box = _wait(browser, lambda d: d.find_element("id", "sample-scaffold"), "the scaffold box")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE, "c1ccccc1")
    browser.find_element("id", "sample-button").click()
    _wait(browser, lambda d: "each checked (RDKit)" in d.find_element("id", "sample-grid").text,
          "the search's summary above the molecules")
    smiles = [card.find_element("class name", "smiles").text
              for card in _cards(browser, "sample-grid")]
    benzene = Chem.MolFromSmiles("c1ccccc1")
    assert smiles and all(Chem.MolFromSmiles(s).HasSubstructMatch(benzene) for s in smiles)
    browser.save_screenshot(str(shots / "7-conditioned-samples.png"))
    where = browser.find_element("id", "sample-where")
    where.send_keys(Keys.CONTROL, "a")
    where.send_keys(Keys.DELETE, "foo>1")
    browser.find_element("id", "sample-button").click()
    message = _wait(browser, lambda d: d.find_element("id", "sample-message").text,
                    "a message about the bad condition")
    assert "unknown property 'foo'" in message


def test_server_log_has_no_traceback(server, browser):
    url, log_path, process = server
    assert process.poll() is None, "the server stopped"
    log = log_path.read_text()
    assert "Traceback" not in log and "Exception on" not in log, log
