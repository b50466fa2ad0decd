"""The real MLflow 3.17 UI in headless Debian Chromium (Selenium): a sweep's runs as users compare them.

The runs come from the session's ``served_sweep`` (conftest: one lean ``mlflow server``, one tiny sweep, shared
with the tracking-server tests). Screenshots land in ``.../browser0/shots/*.png``: open them when a test fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import SERVED_EPOCHS, SERVED_TRIALS, mlflow_client

from sweeps.tracking import client as tracking

pytestmark = [pytest.mark.slow, pytest.mark.browser]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--window-size=1600,1000"]
EPOCHS = SERVED_EPOCHS
TRIALS = SERVED_TRIALS
WAIT_S = 60


@dataclass
class Site:
    url: str
    experiment_id: str
    sweep_id: str
    parent_id: str
    children: dict[str, str]  # run name -> run id
    full_child: tuple[str, str]  # (name, id) of a child with one val/acc point per epoch
    shots: Path
    printed_runs_url: str  # the link the sweep's end-of-run summary printed


@pytest.fixture(scope="module")
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Site:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium chromium-driver)")
    served = request.getfixturevalue("served_sweep")  # the session's server and sweep (see conftest)
    c = mlflow_client(served.url)
    exp_id = c.get_experiment_by_name("quickstart").experiment_id
    runs = c.search_runs([exp_id])
    parent = next(r for r in runs if r.data.tags.get(tracking.TAG_KIND) == "sweep")
    children = {r.info.run_name: r.info.run_id for r in runs
                if r.data.tags.get(tracking.PARENT_TAG) == parent.info.run_id}
    assert parent.info.run_name == served.sweep_id and len(children) == TRIALS
    full = next((name, rid) for name, rid in sorted(children.items())
                if len(c.get_metric_history(rid, "val/acc")) == EPOCHS)
    shots = tmp_path_factory.mktemp("browser") / "shots"
    shots.mkdir()
    printed = re.search(r"MLflow\s*:\s*(\S+/#/experiments/\S+/runs)\s", served.stdout)
    assert printed, served.stdout[-2000:]
    return Site(served.url, exp_id, served.sweep_id, parent.info.run_id, children, full, shots, printed.group(1))


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    opts = Options()
    opts.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={site.shots.parent / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=opts)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any, shot: Path, what: str) -> Any:
    """Wait for ``condition``; on timeout save a screenshot and fail saying what was awaited."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT_S).until(condition)
    except TimeoutException:
        driver.save_screenshot(str(shot))
        body = driver.find_element("tag name", "body").text[:1500]
        pytest.fail(f"timed out waiting for {what} at {driver.current_url}; screenshot {shot}\npage:\n{body}")


def _visible_link(text: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return (By.XPATH, f"//a[normalize-space()={json.dumps(text)}]")


def test_runs_table_shows_the_parent_with_its_children_nested(site: Site, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    # the link the sweep printed (not MLflow's GenAI overview page an experiment opens on)
    assert site.printed_runs_url == f"{site.url}/#/experiments/{site.experiment_id}/runs", site.printed_runs_url
    browser.get(site.printed_runs_url)
    parent = _wait(browser, ec.visibility_of_element_located(_visible_link(site.sweep_id)),
                   site.shots / "runs-table-timeout.png", f"the parent run {site.sweep_id}")
    assert parent.get_attribute("href").endswith(f"/runs/{site.parent_id}")
    # collapsed: only the parent row is shown, but the count includes its nested children
    assert not any(link.is_displayed() for name in site.children
                   for link in browser.find_elements(*_visible_link(name)))
    _wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "body"), f"{TRIALS + 1} matching runs"),
          site.shots / "count-timeout.png", f"'{TRIALS + 1} matching runs'")
    browser.save_screenshot(str(site.shots / "runs-collapsed.png"))

    row = parent.find_element(By.XPATH, "./ancestor::div[@role='gridcell']")
    row.find_element(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']").click()
    for name, run_id in site.children.items():
        child = _wait(browser, ec.visibility_of_element_located(_visible_link(name)),
                      site.shots / "expand-timeout.png", f"child run {name} after expanding the parent")
        assert child.get_attribute("href").endswith(f"/runs/{run_id}")
    browser.save_screenshot(str(site.shots / "runs-expanded.png"))


def test_child_run_page_names_its_parent(site: Site, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    name, run_id = sorted(site.children.items())[0]
    browser.get(f"{site.url}/#/experiments/{site.experiment_id}/runs/{run_id}")
    _wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "body"), "Parent run"),
          site.shots / "child-timeout.png", f"the run page of {name}")
    link = _wait(browser, ec.visibility_of_element_located(_visible_link(site.sweep_id)),
                 site.shots / "child-parent-timeout.png", "the parent run's link on the child's page")
    assert link.get_attribute("href").endswith(f"/runs/{site.parent_id}")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert name in body and "val/acc" in body and "hidden_size" in body
    browser.save_screenshot(str(site.shots / "child-run.png"))


def test_child_metric_chart_plots_val_acc_over_steps(site: Site, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    name, run_id = site.full_child
    browser.get(f"{site.url}/#/experiments/{site.experiment_id}/runs/{run_id}/model-metrics")
    search = _wait(browser, ec.element_to_be_clickable((By.CSS_SELECTOR,
                                                         "input[placeholder='Search metric charts']")),
                   site.shots / "metrics-timeout.png", "the model-metrics page")
    search.send_keys("val/acc")
    legend = f"{name} (val/acc)"
    _wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "body"), legend),
          site.shots / "chart-timeout.png", f"the chart legend {legend!r}")
    lines = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot path.js-line")
    drawn = [p.get_attribute("d") or "" for p in lines]
    # one point per step: a polyline "M x,y L x,y ..." with at least two points
    assert any(d.startswith("M") and "L" in d for d in drawn), drawn
    assert "Step" in browser.find_element(By.CSS_SELECTOR, ".js-plotly-plot").text
    browser.save_screenshot(str(site.shots / "val-acc-chart.png"))
