"""``ttl report --out DIR``: one HTML page of charts about a store, from its tables and log.

What an operator wants to see and ``ttl status`` cannot show in a line:

* **entries by time to expiry**: live entries bucketed by how soon they expire (and those
  that never do), plus the expired ones a sweep has not removed yet;
* **eviction lateness by clock**: for each recent sweep, how long after expiring its
  entries left (the sweep's clock value minus each deleted row's ``expires_at``, from the
  sweep's own change data);
* **recent commits**: the write time of each recent commit (Delta's ``executionTimeMs``)
  and what made it (batch, sweep, an operator's SQL), with the changelog's current lag;
* **drill history**: each restore drill's result and restore time.

Read with delta-rs (no Spark) like ``ttl status``; the charts are matplotlib SVGs inlined in
the page (text kept as text, so the numbers are in the page), and the figures behind them
are embedded as JSON (``<script id="ttl-report-data">``) for machines.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

import pyarrow as pa

from ttl import commit, delta_rs
from ttl import status as status_mod
from ttl.clock import wall_ms_or_now
from ttl.config import Config
from ttl.names import DRILLS_SUFFIX, OP_SWEEP, sibling

#: (label, upper bound in ms) of the time-to-expiry buckets; the last is open-ended.
EXPIRY_BUCKETS = (("< 1 min", 60_000), ("1-10 min", 600_000), ("10 min-1 h", 3_600_000),
                  ("1 h-1 d", 86_400_000), ("> 1 d", None))
#: (label, upper bound in ms) of the lateness buckets.
LATENESS_BUCKETS = (("< 1 s", 1_000), ("1-10 s", 10_000), ("10-60 s", 60_000),
                    ("1-10 min", 600_000), ("> 10 min", None))
COMMITS = 50
SWEEPS = 20


def _bucket(value: int, buckets) -> str:
    for label, upper in buckets:
        if upper is None or value < upper:
            return label
    return buckets[-1][0]


def collect(conf: Config, *, wall_ms: int | None = None, kafka=None) -> dict:
    """The report's figures (plain JSON-able data)."""
    options = delta_rs.profile_options(conf)
    now = wall_ms_or_now(wall_ms)
    table = status_mod.open_table(conf)
    out = status_mod.status(conf, kafka, wall_ms=now)
    clock_now = status_mod.store_now(conf, now)
    cases = " ".join(f"WHEN expires_at - {clock_now} < {upper} THEN '{label}'"
                     for label, upper in EXPIRY_BUCKETS if upper is not None)
    blocked = isinstance(out["live entries"], str)  # status's reason: not scanned
    counted = [] if blocked else status_mod.query({"store": table}, (
        "SELECT CASE WHEN expires_at IS NULL THEN 'never' "
        f"WHEN expires_at <= {clock_now} THEN 'expired' {cases} "
        f"ELSE '{EXPIRY_BUCKETS[-1][0]}' END AS bucket, count(*) AS n FROM store "
        "GROUP BY 1")).to_pylist()  # counted in the query: no column pulled into Python
    by_bucket = {r["bucket"]: r["n"] for r in counted}
    expiry = {label: by_bucket.get(label, 0) for label, _ in EXPIRY_BUCKETS}
    expiry["never"] = by_bucket.get("never", 0)
    expired = by_bucket.get("expired", 0) if counted else out["expired, not yet swept"]
    history = delta_rs.history(table, conf.store.path, COMMITS)
    commits = []
    sweeps = []
    for c in history:
        meta = commit.decode(c.get("userMetadata"))
        what = (meta or {}).get("op") or c.get("operation")
        metrics = c.get("operationMetrics") or {}
        took = metrics.get("executionTimeMs")  # not every operation records it
        commits.append({"version": c["version"], "what": what,
                        "seconds": int(took) / 1000 if took is not None else None,
                        "at": c.get("timestamp")})
        if meta and meta.get("op") == OP_SWEEP and int(metrics.get("numDeletedRows", 0)):
            sweeps.append((c["version"], meta.get("clock", "wall"), int(meta["t"])))
    lateness = {clock: {label: 0 for label, _ in LATENESS_BUCKETS}
                for clock in ("wall", "stream")}
    for version, clock, t in sweeps[:SWEEPS]:
        try:
            gone = pa.table(table.load_cdf(starting_version=version,
                                           ending_version=version).read_all())
        except Exception:  # noqa: BLE001 - its change data is vacuumed: left out
            continue
        for change, e in zip(gone["_change_type"].to_pylist(),
                             gone["expires_at"].to_pylist(), strict=True):
            if change == "delete" and e is not None:
                lateness[clock][_bucket(max(0, t - e), LATENESS_BUCKETS)] += 1
    drills = []
    drill_path = sibling(conf.store.path, DRILLS_SUFFIX)
    drill_table = delta_rs.table_if_exists(drill_path, options)
    if drill_table is not None:  # SQL: an older table may have deletion vectors
        drills = status_mod.query({"d": drill_table},
                                  "SELECT version, started_at, match, keys, restore_seconds "
                                  "FROM d ORDER BY started_at").to_pylist()
    return {"store": conf.store.name, "table": conf.store.path, "generated_at": now,
            "clock": out["clock"], "table_version": out["table version"],
            "live_entries": out["live entries"], "expired_not_swept": expired,
            "expiry": expiry, "lateness": lateness, "commits": list(reversed(commits)),
            "changelog_lag_versions": out.get("changelog lag (versions)"),
            "changelog_lag_seconds": out.get("changelog lag (seconds)"), "drills": drills}


def _svg(fig) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _bars(title: str, counts: dict[str, int], chart: str, xlabel: str) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    bars = ax.bar(list(counts), list(counts.values()), color="#4c72b0")
    ax.bar_label(bars, labels=[str(v) for v in counts.values()], gid=f"{chart}-labels")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("entries")
    svg = _svg(fig)
    plt.close(fig)
    return svg


def _commits_chart(commits: list[dict]) -> str:
    """Each recent commit's write time by its kind; commits whose operation records no time
    are left out (and counted in the title), never drawn at 0 s."""
    import matplotlib.pyplot as plt

    timed = [c for c in commits if c["seconds"] is not None]
    untimed = len(commits) - len(timed)
    fig, ax = plt.subplots(figsize=(9, 3.4))
    kinds = sorted({c["what"] for c in timed})
    for kind in kinds:
        mine = [c for c in timed if c["what"] == kind]
        ax.scatter([c["version"] for c in mine], [c["seconds"] for c in mine], label=kind, s=18)
    ax.set_title("write time of the recent commits"
                 + (f" ({untimed} without a recorded time left out)" if untimed else ""))
    ax.set_xlabel("table version")
    ax.set_ylabel("seconds")
    ax.set_ylim(bottom=0)
    if kinds:  # beside the plot, where no point hides under it
        ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    svg = _svg(fig)
    plt.close(fig)
    return svg


def _drills_chart(drills: list[dict]) -> str:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.2))
    colors = ["#55a868" if d["match"] else "#c44e52" for d in drills]
    bars = ax.bar(range(len(drills)), [d["restore_seconds"] for d in drills], color=colors)
    ax.bar_label(bars, labels=["MATCH" if d["match"] else "MISMATCH" for d in drills],
                 fontsize=7)
    ax.set_xticks(range(len(drills)), [f"v{d['version']}" for d in drills], fontsize=7)
    ax.set_title("restore drills (restore seconds; green: the rebuild matched)")
    ax.set_ylabel("seconds")
    svg = _svg(fig)
    plt.close(fig)
    return svg


def render(data: dict) -> str:
    """The page: a header of figures, one section per chart, the data as JSON."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: the numbers are readable

    def said(text: str) -> str:
        return f"<p class='none'>{html.escape(text)}</p>"

    live = data["expiry"]
    sections = [("expiry", "Entries by time to expiry",
                 _bars("live entries by time to expiry", live, "expiry", "expires in")
                 if any(live.values()) else said("No live entries: nothing expires."))]
    swept = False
    for clock in ("wall", "stream"):
        counts = data["lateness"][clock]
        if any(counts.values()):
            swept = True
            sections.append((f"lateness-{clock}", f"Eviction lateness ({clock} clock)",
                             _bars(f"evicted entries by lateness ({clock} clock)", counts,
                                   f"lateness-{clock}", "swept after expiring by")))
    if not swept:
        sections.append(("lateness", "Eviction lateness",
                         said(f"No sweep in the last {COMMITS} commits evicted an entry.")))
    sections.append(("commits", "Recent commits", _commits_chart(data["commits"])
                     if data["commits"] else said("No commits.")))
    sections.append(("drills", "Drill history", _drills_chart(data["drills"])
                     if data["drills"] else said(
                         "No restore drill has run yet: `ttl drill`, or drill.interval on "
                         "`ttl schedule`.")))
    lag = data["changelog_lag_versions"]
    facts = [("store", data["store"]), ("table", data["table"]),
             ("table version", data["table_version"]), ("clock", data["clock"]),
             ("live entries", data["live_entries"]),
             ("expired, not yet swept", data["expired_not_swept"]),
             ("changelog lag", f"{lag} versions, {data['changelog_lag_seconds']} s"
              if isinstance(lag, int) else lag)]
    rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>"
                   for k, v in facts)
    body = "".join(f'<section class="chart" id="{cid}"><h2>{html.escape(title)}</h2>{svg}'
                   "</section>" for cid, title, svg in sections)
    payload = json.dumps(data, sort_keys=True).replace("</", "<\\/")
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>ttl report: {html.escape(data['store'])}</title><style>"
            "body{font-family:sans-serif;margin:2em;max-width:60em}"
            "th{text-align:left;padding-right:1em}section{margin-top:2em}</style></head>"
            f"<body><h1>ttl report: {html.escape(data['store'])}</h1><table>{rows}</table>"
            f"{body}<script type='application/json' id='ttl-report-data'>{payload}</script>"
            "</body></html>")


def write(conf: Config, out_dir: Path, *, kafka=None, wall_ms: int | None = None) -> Path:
    """Collect, render and write ``out_dir/index.html``; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    page = out_dir / "index.html"
    page.write_text(render(collect(conf, wall_ms=wall_ms, kafka=kafka)))
    return page
