"""OUTDIR/report.html: one self-contained page (inline SVG, no scripts, no Spark) that an
operator can open from an incident ticket.

Pure Python over the small results the job collects; tested without a JVM.
"""

from __future__ import annotations

import datetime as dt
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from controller_svc.analytics import schema

WIDTH = 860
PHASE_COLOURS = {"detection": "#b8b8b8", "election": "#d9822b", "propagation": "#2b7bb9"}
MEASURE_COLOURS = {"queue": "#8e5ea2", "rtt": "#2b9b6b"}


@dataclass(frozen=True)
class ReportData:
    summary: dict[str, Any]
    offline_series: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    failovers: list[dict[str, Any]] = field(default_factory=list)
    tenures: list[dict[str, Any]] = field(default_factory=list)
    latency: list[dict[str, Any]] = field(default_factory=list)
    latency_histogram: list[dict[str, Any]] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    longest_offline: list[dict[str, Any]] = field(default_factory=list)
    bad_records: list[dict[str, Any]] = field(default_factory=list)


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def fmt_ts(ms: int | None) -> str:
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if abs(ms) >= 10_000:
        return f"{ms / 1000:.1f} s"
    if abs(ms) >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.0f} ms" if abs(ms) >= 10 else f"{ms:.2f} ms"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], empty: str = "none") -> str:
    if not rows:
        return f"<p class='empty'>{esc(empty)}</p>"
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if high <= low:
        return [low]
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    start = math.ceil(low / step) * step
    ticks = []
    value = start
    while value <= high + 1e-9:
        ticks.append(value)
        value += step
    return ticks


def offline_chart(points: list[dict[str, Any]]) -> str:
    """Offline partitions over time: the bucket's peak as a step line."""
    if not points:
        return "<p class='empty'>no partition was offline</p>"
    height, left, bottom, top = 220, 56, 30, 12
    t0, t1 = points[0]["ts"], max(points[-1]["ts"], points[0]["ts"] + 1)
    peak = max(max(p["peak"] for p in points), 1)

    def x(ts: float) -> float:
        return float(left + (ts - t0) / (t1 - t0) * (WIDTH - left - 12))

    def y(v: float) -> float:
        return float(top + (1 - v / peak) * (height - top - bottom))

    path: list[str] = [f"M{x(t0):.1f},{y(0):.1f}"]
    for point in points:
        path.append(f"H{x(point['ts']):.1f}V{y(point['peak']):.1f}")
        path.append(f"V{y(point['last']):.1f}")
    path.append(f"H{x(t1):.1f}")
    grid = "".join(
        f"<line x1='{left}' x2='{WIDTH - 12}' y1='{y(t):.1f}' y2='{y(t):.1f}' class='grid'/>"
        f"<text x='{left - 6}' y='{y(t) + 4:.1f}' text-anchor='end'>{int(t)}</text>"
        for t in nice_ticks(0, peak, 4)
        if float(t).is_integer()
    )
    span_s = (t1 - t0) / 1000
    labels = "".join(
        f"<text x='{x(t0 + s * 1000):.1f}' y='{height - 8}' text-anchor='middle'>+{s:g}s</text>"
        for s in nice_ticks(0, span_s, 6)
    )
    return (
        f"<svg width='{WIDTH}' height='{height}' role='img' aria-label='offline partitions over time'>"
        f"{grid}{labels}<path d='{''.join(path)}' class='offline'/>"
        f"<text x='{left}' y='{top - 2}' class='note'>peak {peak} offline · from {esc(fmt_ts(t0))} UTC</text></svg>"
    )


def failover_chart(failovers: list[dict[str, Any]]) -> str:
    """One bar per failover, from the fault: the lost controller's last sign of life -> its loss
    seen (detection), -> new controller elected (election), -> every broker applied (propagation)."""
    rows = [f for f in failovers if f.get("election_ms") is not None]
    if not rows:
        return "<p class='empty'>no failover</p>"
    bar, gap, left = 18, 8, 190

    def phase(row: dict[str, Any], key: str) -> float:
        return max(0.0, row.get(key) or 0)

    longest = max(phase(r, "detection_ms") + phase(r, "election_ms") + phase(r, "propagation_ms") for r in rows) or 1.0
    height = len(rows) * (bar + gap) + 30
    scale = (WIDTH - left - 90) / longest
    parts: list[str] = []
    for i, row in enumerate(rows):
        y = 10 + i * (bar + gap)
        label = f"epoch {row['previous_epoch']}→{row['controller_epoch']} (controller {row['controller_id']})"
        parts.append(f"<text x='{left - 6}' y='{y + 13}' text-anchor='end'>{esc(label)}</text>")
        x = float(left)
        for name in ("detection", "election", "propagation"):
            width = phase(row, f"{name}_ms") * scale
            parts.append(
                f"<rect x='{x:.1f}' y='{y}' width='{width:.1f}' height='{bar}' fill='{PHASE_COLOURS[name]}'>"
                f"<title>{name} {esc(fmt_ms(phase(row, f'{name}_ms')))}</title></rect>"
            )
            x += width
        total = row.get("total_ms")
        text = fmt_ms(total) if total is not None else "not converged"
        parts.append(f"<text x='{x + 6:.1f}' y='{y + 13}'>{esc(text)}</text>")
    legend = (
        f"<text x='{left}' y='{height - 6}' class='note'>"
        f"<tspan fill='{PHASE_COLOURS['detection']}'>■</tspan> last sign of life → loss seen   "
        f"<tspan fill='{PHASE_COLOURS['election']}'>■</tspan> → new controller elected   "
        f"<tspan fill='{PHASE_COLOURS['propagation']}'>■</tspan> → every live broker applied its UpdateMetadata"
        "</text>"
    )
    return (
        f"<svg width='{WIDTH}' height='{height}' role='img' aria-label='failover phases'>{''.join(parts)}{legend}</svg>"
    )


def latency_chart(histogram: list[dict[str, Any]]) -> str:
    """Per API, request counts by power-of-two latency bucket, queue time and round trip side by side."""
    if not histogram:
        return "<p class='empty'>no completed control requests</p>"
    apis = sorted({h["api"] for h in histogram if h["api"] is not None})
    buckets = sorted({int(h["bucket"]) for h in histogram})
    low, high = buckets[0], buckets[-1]
    span = list(range(low, high + 1))
    panel_h, left = 150, 56
    charts: list[str] = []
    for api in apis:
        counts = {(h["measure"], int(h["bucket"])): int(h["count"]) for h in histogram if h["api"] == api}
        peak = max(counts.values()) or 1
        slot = (WIDTH - left - 12) / len(span)
        parts: list[str] = []
        for i, bucket in enumerate(span):
            for j, measure in enumerate(("queue", "rtt")):
                count = counts.get((measure, bucket), 0)
                h = (panel_h - 40) * math.log1p(count) / math.log1p(peak)
                x = left + i * slot + j * slot / 2 + 1
                parts.append(
                    f"<rect x='{x:.1f}' y='{panel_h - 25 - h:.1f}' width='{max(1.0, slot / 2 - 2):.1f}' "
                    f"height='{h:.1f}' fill='{MEASURE_COLOURS[measure]}'>"
                    f"<title>{measure} ≤ {esc(fmt_ms(2.0**bucket))}: {count}</title></rect>"
                )
            parts.append(
                f"<text x='{left + (i + 0.5) * slot:.1f}' y='{panel_h - 10}' text-anchor='middle'>"
                f"{esc(fmt_ms(2.0**bucket))}</text>"
            )
        charts.append(
            f"<h3>{esc(api)}</h3><svg width='{WIDTH}' height='{panel_h}' role='img' aria-label='{esc(api)} latency'>"
            f"{''.join(parts)}<text x='{left}' y='12' class='note'>"
            f"<tspan fill='{MEASURE_COLOURS['queue']}'>■</tspan> queue time "
            f"<tspan fill='{MEASURE_COLOURS['rtt']}'>■</tspan> round trip (log-scaled counts; bucket = upper bound)"
            "</text></svg>"
        )
    return "".join(charts)


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:980px;color:#222}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd}h3{font-size:15px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:left}
th{background:#f4f4f4}.ok{color:#1a7f37;font-weight:600}.bad{color:#c62828;font-weight:600}
.empty{color:#777;font-style:italic}svg text{font-size:11px;fill:#333}.note{fill:#555}
.grid{stroke:#eee}.offline{fill:none;stroke:#c62828;stroke-width:1.6}
pre{background:#f7f7f7;padding:6px;white-space:pre-wrap;word-break:break-all;font-size:12px;margin:2px 0}
"""


def render(data: ReportData) -> str:
    s = data.summary
    total_violations = sum(s["violations"].values())
    verdict = (
        "<p class='ok'>No invariant violations.</p>"
        if total_violations == 0
        else f"<p class='bad'>{total_violations} invariant violation(s).</p>"
    )
    a = s["availability"]
    overview = table(
        ["", ""],
        [
            ("events", s["events"]),
            ("malformed lines", s["malformed"]),
            ("clusters", len(s["clusters"])),
            ("controller elections", s["controllers"]["elections"]),
            ("failovers", a["failovers"]),
            ("longest failover (from the fault)", fmt_ms(a["longest_failover_ms"])),
            ("longest failover detection", fmt_ms(a["longest_failover_detection_ms"])),
            ("time without a controller", fmt_ms(a["controller_gap_ms"])),
            ("offline intervals", a["offline_intervals"]),
            ("partitions that went offline", a["partitions_affected"]),
            ("partition-time offline", fmt_ms(a["offline_partition_ms"])),
            ("of which before the loss was seen", fmt_ms(a["offline_detection_ms"])),
            ("longest offline interval", fmt_ms(a["longest_offline_ms"])),
            ("p99 offline interval", fmt_ms(a["p99_offline_ms"])),
            ("still offline at end of log", a["still_offline"]),
        ],
    )
    invariant_rows = [(name, s["violations"][name]) for name in schema.INVARIANTS]
    sections = [
        f"<h1>Controller state-change analysis</h1><p>{esc(', '.join(s['inputs']))}</p>{verdict}",
        f"<h2>Overview</h2>{overview}",
        "<h2>Invariants</h2>" + table(["invariant", "violations"], invariant_rows),
    ]
    if data.violations:
        items = []
        for v in data.violations:
            records = "".join(
                f"<div>{esc(r['file'])}:{esc(r['line'])}</div><pre>{esc(r['record'])}</pre>" for r in v["records"] or []
            )
            items.append(
                f"<h3>{esc(v['invariant'])}: {esc(v['subject'])}</h3><p>{esc(v['detail'])} "
                f"({esc(fmt_ts(v['ts']))}, cluster {esc(v['cluster'])})</p>{records}"
            )
        sections.append("<h2>Violations (first of each kind)</h2>" + "".join(items))
    clusters: dict[str, Any] = s["clusters"]
    for name in clusters:
        title = "" if len(clusters) == 1 else f" — {esc(name)}"
        sections.append(
            f"<h2>Offline partitions over time{title}</h2>{offline_chart(data.offline_series.get(name, []))}"
        )
        failovers = [f for f in data.failovers if f["cluster"] == name]
        sections.append(f"<h2>Failovers{title}</h2>{failover_chart(failovers)}")
        sections.append(
            table(
                [
                    "epoch",
                    "controller",
                    "previous",
                    "last sign of life",
                    "lost",
                    "elected",
                    "detection",
                    "election",
                    "propagation",
                    "total",
                    "brokers",
                ],
                [
                    (
                        f["controller_epoch"],
                        f["controller_id"],
                        f"{f['previous_controller']} (epoch {f['previous_epoch']}, {f['previous_ended']})",
                        fmt_ts(f["fault_ts"]),
                        fmt_ts(f["lost_ts"]),
                        fmt_ts(f["elected_ts"]),
                        fmt_ms(f["detection_ms"]),
                        fmt_ms(f["election_ms"]),
                        fmt_ms(f["propagation_ms"]),
                        fmt_ms(f["total_ms"]),
                        f"{f['brokers_applied']}/{f['brokers']}",
                    )
                    for f in failovers
                ],
                "no failover",
            )
        )
        tenures = [t for t in data.tenures if t["cluster"] == name]
        sections.append(
            f"<h3>Controller tenures{title}</h3>"
            + table(
                ["epoch", "controller", "start", "end", "ended", "duration"],
                [
                    (
                        t["controller_epoch"],
                        t["controller_id"],
                        fmt_ts(t["start_ts"]),
                        fmt_ts(t["end_ts"]),
                        t["ended"] + (f" ({t['resign_reason']})" if t.get("resign_reason") else ""),
                        fmt_ms(t["duration_ms"]),
                    )
                    for t in tenures
                ],
            )
        )
    sections.append("<h2>Longest offline intervals</h2>")
    sections.append(
        table(
            ["partition", "start (fault)", "detection", "duration", "lost by", "ended by", "new leader"],
            [
                (
                    f"{o['topic']}-{o['partition']}",
                    fmt_ts(o["start_ts"]),
                    fmt_ms(o.get("detection_ms")),
                    fmt_ms(o["duration_ms"]) if o["duration_ms"] is not None else "still offline",
                    o["cause"],
                    o["end_cause"] or "-",
                    "-" if o["new_leader"] is None else f"{o['new_leader']} (epoch {o['new_leader_epoch']})",
                )
                for o in data.longest_offline
            ],
            "no partition went offline",
        )
    )
    sections.append("<h2>Control-request latency</h2>" + latency_chart(data.latency_histogram))
    sections.append(
        table(
            [
                "broker",
                "api",
                "requests",
                "errors",
                "queue p50",
                "queue p99",
                "queue max",
                "rtt p50",
                "rtt p99",
                "rtt max",
            ],
            [
                (
                    row["broker"],
                    row["api"],
                    row["requests"],
                    row["errors"],
                    fmt_ms(row["queue_p50_ms"]),
                    fmt_ms(row["queue_p99_ms"]),
                    fmt_ms(row["queue_max_ms"]),
                    fmt_ms(row["rtt_p50_ms"]),
                    fmt_ms(row["rtt_p99_ms"]),
                    fmt_ms(row["rtt_max_ms"]),
                )
                for row in data.latency
            ],
            "no completed control requests",
        )
    )
    if data.bad_records:
        sections.append(
            "<h2>Malformed lines (first)</h2>"
            + table(
                ["file", "line", "reason", "text"],
                [(b["file"], b["line"], b["reason"], b["value"]) for b in data.bad_records],
            )
        )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Controller state-change analysis</title>"
        f"<style>{STYLE}</style></head><body>{''.join(sections)}</body></html>\n"
    )
