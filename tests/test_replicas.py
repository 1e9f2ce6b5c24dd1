"""`make replicas` (issue 13): two real tritonservers on one bundle behind a real HAProxy; one is killed
mid-run (SIGKILL of its process group); after HAProxy's health checks take it out, no request fails, and
every served answer equals the offline answer of the same text alone."""

from __future__ import annotations

import pytest

import pipeline  # noqa: F401  (before paddle)
from serving_fixtures import tiny_export, tiny_fused_bundle, tool_or_skip  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def haproxy():
    from serving.tools.replicas import ReplicaError, find_haproxy

    return tool_or_skip(find_haproxy, ReplicaError, "ERNIE_BUNDLE_REQUIRE_HAPROXY")


def test_haproxy_config_checks_health_and_retries(haproxy, tmp_path):
    import subprocess

    from serving.tools.replicas import haproxy_config

    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(haproxy_config(18000, [18001, 18002]))
    text = cfg.read_text()
    assert "option httpchk GET /v2/health/ready" in text and "retry-on conn-failure" in text
    check = subprocess.run([str(haproxy.binary), "-c", "-f", str(cfg)], env=haproxy.env, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr  # haproxy itself accepts it


@pytest.mark.slow
def test_failover_keeps_answers_and_loses_nothing_after_it(haproxy, tiny_fused_bundle, tmp_path, monkeypatch):
    import shutil
    import tempfile

    from serving.tools.replicas import format_report, run

    bundle = tmp_path / "tiny"
    shutil.copytree(tiny_fused_bundle, bundle)
    texts = [f"句子{i} " + "赛 股 车 影 房"[i % 9 : i % 9 + 3] for i in range(60)]
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    report = run(bundle, texts, concurrency=4, seconds=8.0, kill_at=3.0, log=lambda _: None)
    assert list(temp.iterdir()) == []  # the replicas' logs and haproxy's files went with their work folder
    print(format_report(report))
    assert report.before.requests > 0 and report.before.failures == 0
    assert report.marked_down_at is not None and report.marked_down_at - report.kill_at < 5.0
    assert report.after.requests > 0 and report.after.failures == 0  # the survivor answers everything
    assert report.answers_checked > 0 and report.answers_differing == 0
    assert report.ok
