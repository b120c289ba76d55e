"""The report page in a real browser: Debian's chromium, headless, renders the report of the
known histories with no script error, and its plots have what they claim: the failover bars
with a detection, an election and a propagation phase, and the offline-partitions curve. A
screenshot is kept beside the report."""

from __future__ import annotations

import json
import pathlib
import re
import shutil
import subprocess
from typing import Any

import pytest

from tests.pipeline import scenarios
from tests.pipeline.test_analytics import run

pytestmark = pytest.mark.pipeline

# Appended to a copy of the page: measures the rendered plots and leaves the result on <body>.
MEASURE = """<script>
(function () {
  const out = {};
  const failovers = document.querySelector("svg[aria-label='failover phases']");
  out.phases = failovers ? Array.from(failovers.querySelectorAll("rect")).map(function (r) {
    const title = r.querySelector("title");
    return [title ? title.textContent.split(" ")[0] : "", r.getBBox().width];
  }) : null;
  const offline = document.querySelector("svg[aria-label='offline partitions over time'] path.offline");
  out.offline = offline ? [offline.getBBox().width, offline.getBBox().height] : null;
  document.body.setAttribute("data-check", JSON.stringify(out));
})();
</script>"""


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium is needed (./dev setup installs it)"
    return path


def headless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_the_report_renders_with_its_plots_and_no_script_error(spark: Any, tmp_path: pathlib.Path) -> None:
    scenarios.clean_failover(tmp_path / "logs")
    outcome = run(spark, [tmp_path / "logs"], tmp_path / "out")
    report = pathlib.Path(outcome.report_path)
    check = report.with_name("report-check.html")
    html = report.read_text(encoding="utf-8")
    assert "</body>" in html
    check.write_text(html.replace("</body>", MEASURE + "</body>"), encoding="utf-8")

    rendered = headless("--enable-logging=stderr", "--v=0", "--virtual-time-budget=5000", "--dump-dom", check.as_uri())
    assert rendered.returncode == 0, rendered.stderr[-3000:]
    errors = [
        line for line in rendered.stderr.splitlines() if "Uncaught" in line or ("CONSOLE" in line and "rror" in line)
    ]
    assert not errors, errors
    match = re.search(r'data-check="([^"]*)"', rendered.stdout)
    assert match, rendered.stdout[-2000:]
    measured = json.loads(match.group(1).replace("&quot;", '"'))
    # One failover: its three phases drawn (4990 ms of detection, 10 of election, 20 of propagation).
    phases = {name: width for name, width in measured["phases"]}
    assert set(phases) == {"detection", "election", "propagation"}
    assert phases["detection"] > phases["propagation"] > 0 and phases["election"] > 0
    width, height = measured["offline"]
    assert width > 100 and height > 10, measured

    screenshot = report.with_name("report.png")
    shot = headless(f"--screenshot={screenshot}", "--window-size=1280,2400", report.as_uri())
    assert shot.returncode == 0 and screenshot.exists(), shot.stderr[-3000:]
    data = screenshot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    kept = pathlib.Path("test-logs") / "report-screenshot.png"
    kept.parent.mkdir(exist_ok=True)
    shutil.copyfile(screenshot, kept)
