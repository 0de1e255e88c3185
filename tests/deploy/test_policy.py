"""The policy scan (checkov) of the rendered manifests, the Secret example and both
Dockerfiles: no finding is left; each skipped check names its reason in the file it skips."""

from __future__ import annotations

from typing import Any

MIN_REASON_CHARS = 30
"""A reason says why; "n/a" or "ok" is not one."""


def test_checkov_finds_nothing_left_to_fix(checkov_reports: list[dict[str, Any]]) -> None:
    frameworks = {report["check_type"] for report in checkov_reports}
    assert frameworks == {"kubernetes", "dockerfile"}, frameworks
    failed = [
        f"{check['check_id']} {check['check_name']} in {check['file_path']} ({check['resource']})"
        for report in checkov_reports
        for check in report["results"]["failed_checks"]
    ]
    assert not failed, "\n".join(failed)
    for report in checkov_reports:
        assert report["summary"]["parsing_errors"] == 0, report["summary"]
        assert report["summary"]["passed"] > 40, report["summary"]  # it did scan


def test_every_skipped_check_says_why(checkov_reports: list[dict[str, Any]]) -> None:
    skipped = [check for report in checkov_reports for check in report["results"]["skipped_checks"]]
    assert skipped, "the skips below are expected to be seen by the scan"
    for check in skipped:
        reason = check["check_result"].get("suppress_comment") or ""
        assert len(reason) >= MIN_REASON_CHARS, f"{check['check_id']}: no reason given"


def test_both_dockerfiles_were_scanned(checkov_reports: list[dict[str, Any]]) -> None:
    docker = next(r for r in checkov_reports if r["check_type"] == "dockerfile")
    results = docker["results"]
    files = {c["file_path"] for k in ("passed_checks", "skipped_checks") for c in results[k]}
    assert any(f.endswith("deploy/agent.Dockerfile") for f in files), files
    assert any(f.endswith("container/Dockerfile") for f in files), files
