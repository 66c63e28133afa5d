"""How long ``seqvae explore`` takes to answer, seen from a real browser (headless Chromium).

Starts ``seqvae explore RUN`` on a free local port, opens the page in Debian's headless Chromium
(Selenium), then clicks ``--clicks`` map points, runs ``--interpolations`` interpolations
between typed SMILES and ``--optimisations`` optimisations (when the run has a property head),
timing each from the click to the drawn result (all 12 neighbours, all N steps, all 21 points
of the trajectory) and, from the browser's resource timings, the server's HTTP answer to the
request that computed it. Saves screenshots of the map, a clicked molecule with its neighbours,
an interpolation and a trajectory into ``--shots``.

    flock /tmp/seqvae-bench.lock python bench/explore_latency.py runs/demo --shots shots/

The run directory gets the map cache (``RUN/explore/``): copy a run you want to keep as it is.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

PAIRS = [("CCO", "c1ccccc1O"), ("CC(=O)Nc1ccc(O)cc1", "CN1C=NC2=C1C(=O)N(C)C(=O)N2C"),
         ("CCN(CC)CC", "O=C(O)c1ccccc1"), ("CC(C)Cc1ccc(C(C)C(=O)O)cc1", "Cc1ccccc1")]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(run_dir: str, molecules: str, n: int, log_path: str):
    port = free_port()
    started = time.monotonic()
    log = open(log_path, "w")
    process = subprocess.Popen([sys.executable, "-m", "seqvae", "explore", run_dir, "--molecules",
                                molecules, "--n", str(n), "--port", str(port)],
                               stdout=log, stderr=subprocess.STDOUT)
    while "open http://" not in open(log_path).read():
        if process.poll() is not None:
            sys.exit(f"seqvae explore stopped:\n{open(log_path).read()}")
        time.sleep(0.2)
    return process, f"http://127.0.0.1:{port}/", time.monotonic() - started


def open_browser(width: int = 1600, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     f"--window-size={width},{height}", "--use-angle=swiftshader",
                     "--enable-unsafe-swiftshader"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def wait_for(driver, condition, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition(driver)
        if value:
            return value
        time.sleep(0.02)
    raise TimeoutError("the page did not reach the expected state")


def point_count(driver) -> int:
    return driver.execute_script("""const gd = document.querySelector('#map .js-plotly-plot');
        return gd && gd._fullData && gd._fullData.length ? gd._fullData[0].x.length : 0;""")


def click_point(driver, index: int) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    plot = driver.find_element("css selector", "#map .js-plotly-plot")
    dx, dy = driver.execute_script("""const gd = document.querySelector('#map .js-plotly-plot');
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, t = gd._fullData[0];
        return [xa._offset + xa.l2p(t.x[arguments[0]]), ya._offset + ya.l2p(t.y[arguments[0]])];""",
                                   index)
    ActionChains(driver).move_to_element_with_offset(
        plot, dx - plot.size["width"] / 2, dy - plot.size["height"] / 2).pause(0.2).click().perform()


def last_request_ms(driver) -> float:
    """Duration of the slowest Dash callback request since the last clear (server time)."""
    durations = driver.execute_script("""return performance.getEntriesByType('resource')
        .filter(e => e.name.includes('_dash-update-component')).map(e => e.duration);""")
    driver.execute_script("performance.clearResourceTimings();")
    return max(durations) if durations else float("nan")


def cards(driver, container: str) -> int:
    return len(driver.find_elements("css selector", f"#{container} .molecule-card"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--molecules", default="moses:test")
    parser.add_argument("--n", type=int, default=5000)
    parser.add_argument("--clicks", type=int, default=8)
    parser.add_argument("--interpolations", type=int, default=4)
    parser.add_argument("--optimisations", type=int, default=4,
                        help="from the last clicked molecule, when the run has a property head")
    parser.add_argument("--shots", default="explore-shots")
    args = parser.parse_args(argv)
    os.makedirs(args.shots, exist_ok=True)
    started_at = time.monotonic()
    process, url, start_seconds = start_server(args.run_dir, args.molecules, args.n,
                                               os.path.join(args.shots, "server.log"))
    print(f"server ready in {start_seconds:.1f}s")
    log_path = os.path.join(args.shots, "server.log")
    while "beam search traced" not in open(log_path).read():  # measure the steady state
        time.sleep(0.2)
    print(f"beam search traced {time.monotonic() - started_at:.1f}s after the start")
    driver = open_browser()
    try:
        started = time.monotonic()
        driver.get(url)
        points = wait_for(driver, point_count)
        print(f"map of {points} points drawn {time.monotonic() - started:.2f}s after the page "
              "was requested")
        time.sleep(1.0)
        driver.save_screenshot(os.path.join(args.shots, "1-map.png"))
        click_ms, click_server_ms = [], []
        for i in range(args.clicks):
            index = (i * 997 + 11) % points
            previous = driver.execute_script(
                "const c = document.getElementById('selected-card'); return c ? c.innerText : '';")
            last_request_ms(driver)
            started = time.monotonic()
            click_point(driver, index)
            wait_for(driver, lambda d: cards(d, "neighbours") == 12 and d.execute_script(
                "const c = document.getElementById('selected-card'); return c ? c.innerText : '';")
                != previous)
            click_ms.append(1000 * (time.monotonic() - started) - 200)  # less the 0.2 s pause
            click_server_ms.append(last_request_ms(driver))
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(args.shots, "2-clicked.png"))
        from selenium.webdriver.common.keys import Keys

        driver.find_element("id", "tab-interpolate").click()
        interp_ms, interp_server_ms = [], []
        for i in range(args.interpolations):
            start, end = PAIRS[i % len(PAIRS)]
            for box, text in (("interp-a", start), ("interp-b", end)):
                field = wait_for(driver, lambda d: d.find_element("id", box))
                field.send_keys(Keys.CONTROL, "a")
                field.send_keys(Keys.DELETE, text)
            last_request_ms(driver)
            started = time.monotonic()
            driver.find_element("id", "interp-button").click()
            wait_for(driver, lambda d: cards(d, "strip") == 8 and d.execute_script(
                "const t = document.querySelector('#strip .strip-title');"
                "return t ? t.innerText : '';").startswith(f"{start} → {end}"))
            interp_ms.append(1000 * (time.monotonic() - started))
            interp_server_ms.append(last_request_ms(driver))
        time.sleep(0.5)
        driver.save_screenshot(os.path.join(args.shots, "3-interpolation.png"))
        optimise_ms, optimise_server_ms = [], []
        if args.optimisations and driver.find_elements("id", "tab-optimise"):
            driver.find_element("id", "tab-optimise").click()
            for i in range(args.optimisations):
                direction = ("higher", "lower")[i % 2]  # a new title says the new result is shown
                wait_for(driver, lambda d: d.find_element(
                    "css selector", f"#direction input[value='{direction}']")).click()
                last_request_ms(driver)
                started = time.monotonic()
                driver.find_element("id", "optimise-button").click()
                title = f"{'up' if direction == 'higher' else 'down'}, 20 steps"
                wait_for(driver, lambda d: cards(d, "trajectory") == 21 and title in d.execute_script(
                    "const t = document.querySelector('#trajectory .strip-title');"
                    "return t ? t.innerText : '';"))
                optimise_ms.append(1000 * (time.monotonic() - started))
                optimise_server_ms.append(last_request_ms(driver))
            time.sleep(0.5)
            driver.save_screenshot(os.path.join(args.shots, "4-optimisation.png"))
    finally:
        driver.quit()
        process.terminate()
        process.wait(timeout=30)
    for name, page, server in (("click (12 neighbours, greedy)", click_ms, click_server_ms),
                               ("interpolation (8 steps, greedy)", interp_ms, interp_server_ms),
                               ("optimisation (20 steps, greedy)", optimise_ms,
                                optimise_server_ms)):
        if not page:
            continue
        print(f"{name}: page {statistics.median(page):.0f} ms median (min {min(page):.0f}, max "
              f"{max(page):.0f}, n={len(page)}); server request {statistics.median(server):.0f} "
              f"ms median (max {max(server):.0f})")
    log = open(os.path.join(args.shots, "server.log")).read()
    print("server log: " + ("TRACEBACK" if "Traceback" in log else "no traceback"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
