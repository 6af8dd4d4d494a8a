"""`helm lint --strict` over the chart, with its defaults and with the production values."""
from __future__ import annotations

import pytest


@pytest.mark.parametrize("with_production_values", [False, True], ids=["defaults", "production"])
def test_chart_passes_strict_lint(helm, chart, with_production_values):
    args = ["lint", "--strict", str(chart.CHART)]
    if with_production_values:
        args += ["-f", str(chart.PRODUCTION_VALUES)]
    result = chart.run_helm(helm, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_every_value_is_documented(chart):
    """Each key in values.yaml carries a comment, or sits under a key whose comment covers it."""
    undocumented = []
    documented_at: list[int] = []  # indents of the documented ancestors of the current line
    previous_comment = False
    for number, line in enumerate((chart.CHART / "values.yaml").read_text().splitlines(), 1):
        stripped = line.lstrip()
        indent = len(line) - len(stripped)
        if stripped.startswith("#"):
            previous_comment = True
            continue
        if not stripped or stripped.startswith("-"):
            previous_comment = False
            continue
        documented_at = [level for level in documented_at if level < indent]
        if ":" in stripped:
            if previous_comment:
                documented_at.append(indent)
            elif not documented_at and not stripped.rstrip().endswith(":"):
                undocumented.append(f"line {number}: {stripped}")
        previous_comment = False
    assert not undocumented, "values without a comment:\n" + "\n".join(undocumented)
