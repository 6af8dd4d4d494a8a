"""NOTES.txt: what to do after an install, rendered by `helm install --dry-run=client` (no cluster needed)."""
from __future__ import annotations


def _notes(helm, chart, *args: str) -> str:
    result = chart.run_helm(helm, "install", "df", str(chart.CHART), "--dry-run=client", "-n", "docflash", *args)
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:", 1)[1]


def test_notes_for_defaults_point_to_port_forwards_and_warn_about_missing_keys(helm, chart):
    notes = _notes(helm, chart)
    assert "port-forward svc/df-docflash-api 8000:8000" in notes
    assert "port-forward svc/df-docflash-flower 5555:5555" in notes
    assert "get secret df-docflash-flower" in notes
    assert "KEDA autoscaling is off" in notes
    assert "WARNING: no API keys are configured" in notes


def test_notes_for_production_show_the_ingress_and_keda_range(helm, chart):
    notes = _notes(helm, chart, "-f", str(chart.PRODUCTION_VALUES))
    assert "docflash.internal.example.com" in notes
    assert "between 0 and 16" in notes
    assert "WARNING" not in notes and "get secret" not in notes
