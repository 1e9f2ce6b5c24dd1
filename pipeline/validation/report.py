"""``report.md`` and the accuracy-vs-throughput plot (PNG, matplotlib Agg)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

PLOT_FILE = "accuracy_vs_throughput.png"
REPORT_FILE = "report.md"


def plot_accuracy_vs_throughput(rows: Sequence[dict], out_path: Path, fp32_accuracy: float, batch_size: int,
                                metric_label: str = "accuracy") -> Path:
    """One point per backend: x = sentences/s (dev lengths, batch ``batch_size``), y = dev accuracy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=100)
    for row in rows:
        if row.get("sentences_per_s") is None or row.get("accuracy") is None:
            continue
        marker = "o" if "fp32" in row["backend"] else "s"
        ax.scatter(row["sentences_per_s"], 100 * row["accuracy"], marker=marker, s=50)
        ax.annotate(row["backend"], (row["sentences_per_s"], 100 * row["accuracy"]), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.axhline(100 * fp32_accuracy, color="grey", linestyle="--", linewidth=0.8, label="FP32 dygraph reference")
    ax.set_xlabel(f"throughput (sentences/s, dev lengths, batch {batch_size})")
    ax.set_ylabel(f"dev {metric_label} (%)")
    ax.set_title(f"{metric_label} vs throughput per backend")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(out_path)
    plt.close(fig)
    return Path(out_path)


def _range(r) -> str:
    """' [lo-hi]' of paired per-round ratios (interleaved timing), or nothing."""
    return f" [{r[0]:.2f}–{r[1]:.2f}]" if r else ""


def _f(value, fmt: str = ".4f", none: str = "-") -> str:
    return none if value is None else format(value, fmt)


def _grid_lines(grid: dict[str, list[dict]]) -> list[str]:
    """One batch x seq table per backend that has cells."""
    lines = []
    for backend, cells in grid.items():
        if not cells:
            continue
        seqs = sorted({c["seq_len"] for c in cells})
        batches = sorted({c["batch_size"] for c in cells})
        lines += [f"### {backend}", "", "| batch \\ seq | " + " | ".join(str(s) for s in seqs) + " |",
                  "|---|" + "---|" * len(seqs)]
        by = {(c["batch_size"], c["seq_len"]): c for c in cells}
        for b in batches:
            vals = []
            for s in seqs:
                c = by.get((b, s))
                vals.append("-" if c is None else f"{c['sentences_per_s']:.1f} (p99 {c['latency_ms_p99']:.1f} ms)")
            lines.append(f"| {b} | " + " | ".join(vals) + " |")
        lines.append("")
    return lines


def write_report(out_dir: Path, *, task: str, gates: Sequence, rows: Sequence[dict], skipped: dict[str, str],
                 grid: dict[str, list[dict]], sizes: dict[str, int], selected: dict, chosen: str,
                 fp32_accuracy: float, batch_size: int, metric_label: str = "accuracy", checked: dict | None = None,
                 anchor: dict | None = None, interval: dict | None = None) -> Path:
    """``checked``: which backends were measured and which not (``stages.validate.Checked.as_dict``); ``anchor``: what
    the anchor is, its metric, drop and x FP32 (gates.json's summary ``anchor``); ``interval``: how sure the dev set
    makes the shipped form's figures (``uncertainty.DevUncertainty.as_dict``)."""
    lines = [f"# Validation report: {task}", ""]
    passed = all(g.passed for g in gates)
    lines += [f"**Gates: {'PASSED' if passed else 'FAILED'}** - chosen backend `{chosen}`; "
              f"FP32 dygraph dev {metric_label} {fp32_accuracy:.4f}.", ""]
    lines += ["| gate | threshold | measured | result |", "|---|---|---|---|"]
    for g in gates:
        lines.append(f"| {g.name} | {g.kind} {g.threshold:.4g}{g.unit} | {_f(g.measured, '.4g')}{g.unit} | "
                     f"{'pass' if g.passed else 'FAIL'} |")
    if interval:
        metric, drop = interval["metric"], interval["drop_points"]
        lines += ["", f"How sure the dev set makes these: {chosen}'s {metric_label} [{metric['low']:.4f}, "
                      f"{metric['high']:.4f}], its drop from FP32 [{drop['low']:+.2f}, {drop['high']:+.2f}] points "
                      f"({interval['how']})."]
    lines += ["", f"Selected candidate: `{selected.get('name', '?')}` (width_mult {selected.get('width_mult', '?')}, "
              + (f"depth_mult {selected['depth_mult']}, " if selected.get("depth_mult", 1.0) < 1.0 else "") +
              f"quantization {selected.get('quantization', '?')}).", ""]
    if checked:
        names = lambda xs: ", ".join(f"`{x}`" for x in xs)  # noqa: E731
        lines += [f"Backends checked: {names(checked.get('measured') or [])} and the anchor ({checked.get('why', '')})."]
        if checked.get("not_checked"):
            lines += ["", f"Not checked (skipped: no gate reads them): {names(checked['not_checked'])}; "
                          "`--set validate.backends=all` (or a list of backend names) measures them."]
        lines += [""]
    if anchor:  # the one-liner a user would try instead: its metric too, not only its speed
        speed = f", {anchor['throughput_ratio']:.2f}x FP32" if anchor.get("throughput_ratio") is not None else ""
        below = (interval or {}).get("below_anchor_points")
        against = (f"; {chosen} scores {interval['below_anchor_value']:+.2f} points below it, [{below['low']:+.2f}, "
                   f"{below['high']:+.2f}] over the same resamples") if below else ""
        lines += [f"The anchor, {anchor['what']}: {metric_label} {_f(anchor.get('accuracy'))} (drop "
                  f"{_f(anchor.get('accuracy_drop_points'), '.2f')} pts){speed}{against}.", ""]
    lines += ["## Parity and throughput per backend", "",
              f"Throughput: real dev lengths, dynamic padding, batch {batch_size}; x FP32: vs the FP32 model on the same runtime "
              "(OpenVINO: vs the FP32 ONNX in ONNX Runtime), same run; x anchor: vs ONNX Runtime's quantize_dynamic(per_channel) "
              "of the same FP32 ONNX, in the same interleaved rounds.", "",
              f"| backend | {metric_label} | drop (pts) | same prediction | max abs diff | mean abs diff | sent/s | x FP32 | x anchor | p50 ms | p99 ms | b1 p99 ms | peak MB | file MB |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {_f(r.get('accuracy'))} | {_f(r.get('accuracy_drop_points'), '.2f')} | "
            f"{_f(r.get('argmax_agreement'))} | {_f(r.get('max_abs_logit_diff'), '.3g')} | {_f(r.get('mean_abs_logit_diff'), '.3g')} | "
            f"{_f(r.get('sentences_per_s'), '.1f')} | {_f(r.get('throughput_ratio'), '.2f')}{_range(r.get('throughput_ratio_range'))} | "
            f"{_f(r.get('anchor_ratio'), '.2f')}{_range(r.get('anchor_ratio_range'))} | {_f(r.get('latency_ms_p50'), '.1f')} | "
            f"{_f(r.get('latency_ms_p99'), '.1f')} | {_f(r.get('batch1_p99_ms'), '.1f')} | {_f(r.get('peak_rss_mb'), '.0f')} | "
            f"{_f(r.get('model_mb'), '.1f')} |")
    for name, reason in skipped.items():
        lines.append(f"| {name} | skipped: {reason} |" + " |" * 12)
    for name, reason in ((checked or {}).get("not_checked") or {}).items():
        lines.append(f"| {name} | not checked: {reason} (validate.backends: all measures it) |" + " |" * 12)
    reused = [f"{r['backend']}: {r['dev_outputs']}" for r in rows if r.get("dev_outputs", "evaluated here") != "evaluated here"]
    if reused:
        lines += ["", "Dev outputs (every example; the others were evaluated here): " + "; ".join(reused) + "."]
    lines += ["", f"![accuracy vs throughput]({PLOT_FILE})", "", "## Fixed-shape grid (sentences/s, median of repeats)", ""]
    lines += _grid_lines(grid)
    lines += ["## Files", "", "| artifact | MB |", "|---|---|"]
    for name, size in sizes.items():
        lines.append(f"| {name} | {size / 2**20:.2f} |")
    path = Path(out_dir) / REPORT_FILE
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
