"""The results explorer: what its pages may hold (built from hand-made records), then the site in a real headless
browser (Debian's chromium through selenium): the index loads without a console error, a table sorts on a header
click, a run page shows its plot. Built from a few committed records."""

from __future__ import annotations

import csv
import itertools
import re
from pathlib import Path

import pytest

from tasks.grid.paths import REPO_ROOT, RUNS_DIR
from tasks.grid.record_format import write_record
from tasks.grid.records import read_record
from tests.conftest import IN_CI
from tests.fake_records import cifar_record

# A few records of different kinds: FCPTS with a step history, POT (per-layer, no history), a detector.
SUBSET = [
    "cifar/cifar10/resnet56/fcpts-sp90-paper-seed0.json",
    "cifar/cifar10/resnet56/pot-l2norm-sp90-paper-cpu-seed0.json",
    "cifar/cifar10/resnet32/fcpts-sp80-paper-cpu-seed0.json",
    "imagenet/imagenet-val1300/efficientnet_lite0/fcpts-sp50-cpu-seed0.json",
    "voc/voc-cifar10/mb2-ssd-lite-160/fcpts-sp90-cpu-seed0.json",
]
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _missing(what: str):
    message = f"{what}: apt-get install -y chromium chromium-driver; pip install selenium (the [test] extra)"
    if IN_CI:
        pytest.fail(f"CI runs the browser test: {message}")
    pytest.skip(message)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    from tasks.reporting.site import build_site

    runs = tmp_path_factory.mktemp("runs")
    for rel in SUBSET:
        (runs / rel).parent.mkdir(parents=True, exist_ok=True)
        write_record(runs / rel, read_record(RUNS_DIR / rel))  # with the side file of its calibration lists
    out = tmp_path_factory.mktemp("site") / "site"
    build_site(out, runs_dir=runs)
    return out


def fake_site(tmp_path: Path, **fields) -> Path:
    """The site of two hand-made records, FCPTS and POT in one cell (so in Tables 2 and 6), with `fields` set."""
    from tasks.reporting.site import build_site

    runs = tmp_path / "runs"
    for method in ("fcpts", "pot-l2norm"):
        record = {**cifar_record(method, profile="paper"), **fields}
        (runs / record["_path"]).parent.mkdir(parents=True, exist_ok=True)
        write_record(runs / record.pop("_path"), record)
    build_site(tmp_path / "site", runs_dir=runs)
    return tmp_path / "site"


def test_a_link_in_a_record_s_text_cannot_run_script(tmp_path):
    index = (fake_site(tmp_path, device="[x](javascript:alert(1))") / "index.html").read_text()
    assert re.findall(r"href=\S*javascript", index, re.IGNORECASE) == []
    assert "[x](javascript:alert(1))" in index  # Table 6 quotes the device, as text


def test_no_page_shows_a_machine_s_absolute_path(tmp_path):
    command = f"python -m tasks.cifar --results-dir /home/alice/runs --weights {REPO_ROOT}/results/weights/r.th"
    pages = {p.name: p.read_text() for p in fake_site(tmp_path, command=command).rglob("*.html")}
    assert [name for name, text in pages.items() if "/home/alice" in text or str(REPO_ROOT) in text] == []
    pot = pages["cifar--cifar10--resnet32--pot-l2norm-sp90-paper-seed0.html"]
    assert "--results-dir …/runs --weights results/weights/r.th" in pot  # outside the checkout: its last part


def test_a_rebuild_draws_only_the_run_plots_whose_picture_changed(tmp_path):
    def plots():
        return {f.name: (f.stat().st_ino, f.stat().st_mtime_ns) for f in (site / "runs").glob("*.png")}

    site = fake_site(tmp_path)
    first = plots()
    fake_site(tmp_path)
    assert plots() == first and len(first) == 2  # the same records: both plots kept as they were
    fake_site(tmp_path, per_layer=[{"name": "conv", "numel": 10, "sparsity": 0.9}])
    assert len(plots()) == 2 and not set(plots()) & set(first)  # both redrawn, the stale ones gone


def test_a_plot_s_code_key_is_what_its_code_computes_not_where_it_stands():
    from tasks.reporting.site import code_key

    def compiled(source: str, line: int):
        namespace: dict = {}
        exec(compile("\n" * line + source, "plot.py", "exec"), namespace)
        return namespace["draw"].__code__

    source = "def draw(x):\n    return [x * 2 for _ in range(3)]\n"
    assert code_key(compiled(source, 0)) == code_key(compiled(source, 5))
    assert code_key(compiled(source, 0)) != code_key(compiled(source.replace("2", "3"), 0))


def test_a_model_named_on_its_first_row_only_groups_the_rows_below_it():
    from tasks.reporting.site import row_groups

    rows = [["a", "m", "1"], ["", "n", "2"], ["b", "m", "3"]]
    assert row_groups(["model", "method", "70%"], rows) == (1, [0, 0, 1])


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium is not installed")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        _missing(f"no {CHROMIUM} or {CHROMEDRIVER}")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,900"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def click(browser, element) -> None:
    """A user's click on `element`, scrolled to the middle of the window (not under the sticky navigation bar) once
    every figure has loaded: a lazy figure above it loading during the scroll moved it under the pointer."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.execute_script("document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; });")
    WebDriverWait(browser, 30).until(lambda b: b.execute_script("return [...document.images].every(i => i.complete)"))
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    element.click()


def test_the_site_has_every_run_and_a_csv_index(site):
    with open(site / "records.csv") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["record"] for r in rows) == sorted(SUBSET)
    r56 = next(r for r in rows if r["record"] == SUBSET[0])
    assert r56["paper"] == "92.02" and r56["metric"] == "top1"  # the paper's CIFAR-10 ResNet-56 FCPTS at 90%
    assert len(list((site / "runs").glob("*.html"))) == len(SUBSET) == len(list((site / "runs").glob("*.png")))
    assert all(f.stat().st_size > 0 for f in (site / "figures").glob("*.png"))
    index = (site / "index.html").read_text()
    assert [n for n in range(1, 8) if not re.search(rf"<h2>Table {n}\b", index)] == []  # every paper table
    assert "https://" not in index and "http://" not in index  # nothing from the network


def test_the_imagenet_and_voc_tables_link_their_cells_to_their_runs_too(site):
    index = (site / "index.html").read_text()
    for table, record in (("table3_imagenet_cnn", SUBSET[3]), ("table5_voc", SUBSET[4])):
        section = index[index.index(f"<section id='{table}'>") :]
        slug = record.removesuffix(".json").replace("/", "--")
        assert f"href='runs/{slug}.html'" in section[: section.index("</section>")], table


def test_index_loads_without_console_errors_and_a_table_sorts(site, browser):
    from selenium.webdriver.common.by import By

    browser.get((site / "index.html").as_uri())
    assert browser.title == "FCPTS results"
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    table = browser.find_element(By.ID, "runs-table")
    header = next(th for th in table.find_elements(By.TAG_NAME, "th") if th.text.strip() == "ours")
    column = [th.text.strip() for th in table.find_elements(By.TAG_NAME, "th")].index("ours")

    def values():
        return [
            float(row.find_elements(By.TAG_NAME, "td")[column].text)
            for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")
        ]

    assert values() != sorted(values())  # records come in path order, not by value
    click(browser, header)
    assert values() == sorted(values()) and header.get_attribute("aria-sort") == "ascending"
    click(browser, header)
    assert values() == sorted(values(), reverse=True)
    # the tables rendered from the records sort too: Table 2's first CIFAR column, within each model's rows
    cifar = browser.find_element(By.CSS_SELECTOR, "#table2_cifar table")
    click(browser, cifar.find_elements(By.TAG_NAME, "th")[2])
    assert cifar.find_elements(By.TAG_NAME, "th")[2].get_attribute("aria-sort") == "ascending"
    models = [row.find_element(By.TAG_NAME, "td").text for row in cifar.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert [model for model, _ in itertools.groupby(models)] == ["resnet32", "resnet56"]
    # Table 3 names a model on its first row only: the rows below it stay with it too
    imagenet = browser.find_element(By.CSS_SELECTOR, "#table3_imagenet_cnn table")
    model_of, model = {}, ""
    for row in imagenet.find_elements(By.CSS_SELECTOR, "tbody tr"):
        model = row.find_element(By.TAG_NAME, "td").text or model
        model_of[row.id] = model
    for column in (2, 0):  # a sparsity column, then the model column itself (whole groups move)
        click(browser, imagenet.find_elements(By.TAG_NAME, "th")[column])
        models = [model_of[row.id] for row in imagenet.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert len([model for model, _ in itertools.groupby(models)]) == len(set(models)) > 1
    assert all(img.get_property("naturalWidth") > 0 for img in browser.find_elements(By.CSS_SELECTOR, "figure img"))


def test_a_run_page_shows_its_plot(site, browser):
    from selenium.webdriver.common.by import By

    browser.get((site / "index.html").as_uri())
    click(browser, browser.find_element(By.LINK_TEXT, SUBSET[0]))
    assert "resnet56 on cifar10" in browser.title
    plot = browser.find_element(By.ID, "run-plot")
    assert plot.get_property("complete") and plot.get_property("naturalWidth") > 400
    assert "python -m tasks.cifar" in browser.find_element(By.TAG_NAME, "body").text  # provenance: its command
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []


def test_a_table2_cell_links_to_its_run_page(site, browser):
    from selenium.webdriver.common.by import By

    browser.get((site / "index.html").as_uri())
    slug = SUBSET[0].removesuffix(".json").replace("/", "--")
    click(browser, browser.find_element(By.CSS_SELECTOR, f"#table2_cifar td a[href='runs/{slug}.html']"))
    assert browser.title == "resnet56 on cifar10: FCPTS (ours) at 90%"


def test_typing_in_the_filter_shows_only_the_runs_holding_every_word(site, browser):
    from selenium.webdriver.common.by import By

    browser.get((site / "index.html").as_uri())
    box = browser.find_element(By.ID, "runs-filter")

    def shown():
        rows = browser.find_elements(By.CSS_SELECTOR, "#runs-table tbody tr")
        return [row.find_element(By.TAG_NAME, "a").text for row in rows if row.is_displayed()]

    click(browser, box)
    box.send_keys("RESNET56 pot")
    assert shown() == [SUBSET[1]] and browser.find_element(By.ID, "runs-shown").text == "1 of 5 runs"
    box.clear()
    box.send_keys(" ")  # clear() fires no input event
    assert sorted(shown()) == sorted(SUBSET)


@pytest.mark.parametrize("target", ["table2_cifar", "figures"])  # the five runs are too few to scroll #runs up
def test_a_jump_to_a_section_leaves_its_heading_below_the_sticky_bar(site, browser, target):
    browser.get(f"{(site / 'index.html').as_uri()}#{target}")
    heading_top, bar_bottom = browser.execute_script(
        "const t = document.getElementById(arguments[0]), h = t.matches('h2') ? t : t.querySelector('h2');"
        "return [h.getBoundingClientRect().top, document.querySelector('nav').getBoundingClientRect().bottom];",
        target,
    )
    assert heading_top >= bar_bottom
