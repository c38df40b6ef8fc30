"""Alerts in over HTTP on ``mldiag up``: Alertmanager and Grafana notifications capture a real JAX job.

The job serves the profiler behind ``mldiag agent`` (as on a node). A firing
notification posted with the alert token opens one monitored event and one
automatic capture that the agent performs; 999 repeats of it are counted on
the event and capture nothing more; the resolved notification closes the
event. Alertmanager's payload is version 4 of its ``webhook_config``; Grafana's
is its webhook contact point's.
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone

import pytest
import requests

from capture_support import create_run, mldiag_json, profile_file, running_agent, session, wait_for

pytestmark = pytest.mark.slow

RUN = "alerts-in"
TOKEN = "e2e-alert-token-5f0c1d2e3a4b"
MLDIAG_UP_ENV = {"MLDIAG_ALERT_TOKEN": TOKEN}
REPEATS = 999


@pytest.fixture(scope="module")
def agent(control_plane, workloads, tmp_path_factory):
    create_run(control_plane, RUN)
    (workload,) = workloads(1)
    with running_agent(control_plane, RUN, workload.port, tmp_path_factory.mktemp("agent-home")):
        wait_for(lambda: mldiag_json(control_plane, "profiler-target", "list", "--machine-learning-run", RUN),
                 "the agent's heartbeat")
        # One capture per event stays the rule; a short cooldown lets the Grafana test's event capture too.
        mldiag_json(control_plane, "machine-learning-run", "set-auto-capture", RUN, "--duration", "1s",
                    "--cooldown", "1s")
        yield workload


def notification(status: str, fingerprint: str, starts_at: str, **extra) -> dict:
    alert = {
        "status": status,
        "labels": {"alertname": "StepTimeHigh", "severity": "critical", "mldiag_run": RUN},
        "annotations": {"summary": "Step time 30% above its baseline"},
        "startsAt": starts_at,
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else datetime.now(timezone.utc).isoformat(),
        "generatorURL": "http://prometheus.example.org:9090/graph?g0.expr=step_time",
        "fingerprint": fingerprint,
    }
    return {"receiver": "mldiag", "status": status, "alerts": [alert], "groupLabels": {"alertname": "StepTimeHigh"},
            "commonLabels": alert["labels"], "commonAnnotations": alert["annotations"],
            "externalURL": "http://alerts.example.org", "groupKey": "{}:{alertname=\"StepTimeHigh\"}",
            "truncatedAlerts": 0, **extra}


def event(control_plane, event_id: str) -> dict:
    return mldiag_json(control_plane, "monitored-events", "describe", event_id, "--machine-learning-run", RUN)


def auto_sessions(control_plane) -> list[str]:
    sessions = mldiag_json(control_plane, "profiler-session", "list", "--machine-learning-run", RUN)
    return sorted(s["name"].rsplit("/", 1)[1] for s in sessions if s.get("autoCaptured"))


def fire_repeat_resolve(control_plane, route: str, firing: dict, resolved: dict, auth: dict) -> str:
    """Post the firing notification, check its capture, repeat it, resolve it; returns the session id."""
    url = f"{control_plane.url}/v1alpha/alerts:{route}"
    assert requests.post(url, json=firing, timeout=10).status_code == 401
    assert requests.post(url, json=firing, headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    response = requests.post(url, json=firing, headers=auth, timeout=10)
    assert response.status_code == 200, response.text
    (landed,) = response.json()["alerts"]
    event_id = landed["monitoredEvent"].rsplit("/", 1)[1]

    opened = wait_for(lambda: (e := event(control_plane, event_id)).get("profilerSessions") and e, "the capture")
    assert "endTime" not in opened and opened["analyzerReports"][0]["detectionState"] == "DETECTED"
    (session_name,) = opened["profilerSessions"]
    session_id = session_name.rsplit("/", 1)[1]
    captured = wait_for(lambda: (s := session(control_plane, RUN, session_id))["targetSessions"]
                        .get("node-a-0", {}).get("sessionPhase") not in (None, "ACTIVE") and s,
                        "the agent's capture")
    assert captured["autoCaptured"] is True and captured["monitoredEvents"] == [opened["name"]]
    assert captured["targetSessions"]["node-a-0"]["sessionPhase"] == "SUCCEEDED"
    assert profile_file(control_plane, RUN, session_id, "node-a-0").stat().st_size > 10_000

    with requests.Session() as http:
        for _ in range(REPEATS):
            assert http.post(url, json=firing, headers=auth, timeout=10).status_code == 200
    repeated = wait_for(lambda: (e := event(control_plane, event_id)).get("suppressedCount") == REPEATS and e,
                        "every repeat to be counted", timeout_s=180)
    assert repeated["profilerSessions"] == [session_name]
    assert repeated["suppressions"][-1]["reason"].startswith("already captured for this event")

    assert requests.post(url, json=resolved, headers=auth, timeout=10).status_code == 200
    closed = wait_for(lambda: (e := event(control_plane, event_id)).get("endTime") and e, "the event to close")
    assert closed["analyzerReports"][0]["detectionState"] == "NOT_DETECTED"
    return session_id


def test_alertmanager_fires_one_capture_counts_repeats_and_resolves(control_plane, agent):
    starts_at = datetime.now(timezone.utc).isoformat()
    firing = notification("firing", "1a30ba71cca2921f", starts_at, version="4")
    firing["alerts"][0]["labels"]["mldiag_targets"] = "node-a-0"
    resolved = notification("resolved", "1a30ba71cca2921f", starts_at, version="4")
    resolved["alerts"][0]["labels"]["mldiag_targets"] = "node-a-0"
    session_id = fire_repeat_resolve(control_plane, "alertmanager", firing, resolved,
                                     {"Authorization": f"Bearer {TOKEN}"})
    assert auto_sessions(control_plane) == [session_id]


def test_grafana_fires_one_capture_counts_repeats_and_resolves(control_plane, agent):
    before = auto_sessions(control_plane)
    starts_at = datetime.now(timezone.utc).isoformat()
    grafana = {"orgId": 1, "version": "1", "title": "[FIRING:1] StepTimeHigh", "state": "alerting", "message": ""}
    firing = notification("firing", "c6eadffa33fcdf37", starts_at, **grafana)
    firing["alerts"][0].update(silenceURL="", dashboardURL="", panelURL="", values={"B": 0.26, "C": 1})
    resolved = notification("resolved", "c6eadffa33fcdf37", starts_at, **{**grafana, "state": "ok"})
    basic = base64.b64encode(f"grafana:{TOKEN}".encode()).decode()
    session_id = fire_repeat_resolve(control_plane, "grafana", firing, resolved, {"Authorization": f"Basic {basic}"})
    assert auto_sessions(control_plane) == sorted([*before, session_id])
