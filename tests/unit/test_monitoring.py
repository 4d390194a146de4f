"""The Grafana dashboard and the Prometheus alert rules in deploy/monitoring/ name only
metrics the stream driver exports, and are well formed."""

from __future__ import annotations

import json
import re

import yaml

from ttl.config import REPO_ROOT
from ttl.metrics import Metrics, exported_names

MONITORING = REPO_ROOT / "deploy" / "monitoring"
METRIC = re.compile(r"\bttl_[a-z_]+\b")


def _exprs_of_dashboard() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dashboard["panels"], "a dashboard without panels"
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert all(p["targets"] for p in dashboard["panels"])
    return exprs + [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]


def _rules() -> list[dict]:
    doc = yaml.safe_load((MONITORING / "alerts.yaml").read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def test_every_metric_the_dashboard_and_the_alerts_name_is_exported():
    exported = exported_names(Metrics("s"))
    named = {m for expr in _exprs_of_dashboard() + [r["expr"] for r in _rules()]
             for m in METRIC.findall(expr)}
    assert named and named <= exported, sorted(named - exported)
    # and the ones an operator most needs are watched
    assert {"ttl_changelog_lag_seconds", "ttl_lease_held", "ttl_last_drill_match",
            "ttl_eviction_lateness_seconds_bucket", "ttl_batch_duration_seconds_bucket"} <= named


def test_every_alert_has_a_severity_a_summary_and_a_unique_name():
    rules = _rules()
    names = [r["alert"] for r in rules]
    assert len(names) == len(set(names)) and all(n.startswith("Ttl") for n in names)
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["expr"].strip(), rule["alert"]
        assert rule["expr"].count("(") == rule["expr"].count(")"), rule["alert"]
