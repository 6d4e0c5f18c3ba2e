"""Turn a pytest-benchmark JSON into the README table (markdown) and a PNG chart of ratios.

    python -m benchmarks.report RESULTS.json [MORE.json ...] [--out benchmarks/results]
    python -m benchmarks.report --scale scale-a.json [scale-b.json ...] [--out DIR --label L]
    python -m benchmarks.report --append append-a.json [append-b.json ...]

The second form renders the scale benchmark (scale.py): latency per query kind and file size
against corpus size, as ``scale-<label>.md`` and ``scale-<label>.png``.

Latencies use each benchmark's minimum (over all the result files given): the least-disturbed
run is the best estimate of the cost itself on a shared machine. Every figure is reported as a
ratio to a baseline.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

KINDS = ("word", "phrase", "prefix", "substring", "cjk2", "mixed")
LABELS = {"word": "word (AND)", "phrase": "phrase", "prefix": "prefix*",
          "substring": "CJK substring (3+)", "cjk2": "2-char CJK", "mixed": "Latin + CJK"}
FLOOR_TARGET = 1.5
CJK_TARGET = 20.0
SIZE_TARGET = 0.35


def load(paths: list[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """``{(kind, layout): {"min": seconds, "extra": extra_info}}``, minima over all files."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in paths:
        for bench in json.loads(path.read_text())["benchmarks"]:
            extra = bench.get("extra_info", {})
            if "kind" not in extra or "layout" not in extra:
                continue
            key = (extra["kind"], extra["layout"])
            if key not in out or bench["stats"]["min"] < out[key]["min"]:
                out[key] = {"min": bench["stats"]["min"], "extra": extra}
    return out


def figures(results: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    queries = {}
    for kind in KINDS:
        head = results[(kind, "head")]["min"]
        row = {"head_ms": head * 1000, "floor_ms": results[(kind, "floor")]["min"] * 1000,
               "inline_ms": results[(kind, "inline")]["min"] * 1000}
        row["vs_floor"] = head / results[(kind, "floor")]["min"]
        row["inline_vs_head"] = results[(kind, "inline")]["min"] / head
        row["inline_vs_floor"] = results[(kind, "inline")]["min"] / results[(kind, "floor")]["min"]
        if (kind, "like") in results:
            row["like_vs_head"] = results[(kind, "like")]["min"] / head
        queries[kind] = row
    storage = results[("storage", "head")]["extra"]
    appends = {layout: results[("append", layout)]["extra"]["messages"]
               / results[("append", layout)]["min"] for layout in ("inline", "floor", "head")}
    migration = results[("migration", "head")]["min"]
    return {"queries": queries, "storage": storage, "appends": appends, "migration_s": migration}


def markdown(fig: dict[str, Any]) -> str:
    st = fig["storage"]
    size_ratio = st["head_bytes"] / st["inline_bytes"]
    lines = [
        f"Corpus: {st['messages']:,} messages, {st['text_bytes'] / 1e6:.0f} MB of text "
        "(English and CJK prose, tool outputs 300 B-100 kB, tool-call JSON); "
        f"minima over {fig.get('runs', 1)} run(s).",
        "",
        "| figure | result | target |",
        "|---|---|---|",
        f"| file size, head after `optimize_storage` / inline v11 | {size_ratio:.2f}x "
        f"({st['head_bytes'] / 1e6:.0f} MB / {st['inline_bytes'] / 1e6:.0f} MB) "
        f"| <= {SIZE_TARGET:.2f}x |",
        f"| `alembic upgrade head` on the inline file (blocking part) | {fig['migration_s']:.2f} s "
        f"= {fig['migration_s'] / (st['upgrade_s'] + st['optimize_s']):.2f}x of upgrade + "
        "optimize_storage | cheap |",
        f"| append throughput, library / raw sqlite3 on head | "
        f"{fig['appends']['head'] / fig['appends']['floor']:.2f}x | - |",
        f"| append throughput, library at head / raw sqlite3 on inline v11 | "
        f"{fig['appends']['head'] / fig['appends']['inline']:.2f}x | - |",
        "",
        "| query | library / raw-sqlite3 floor | v11 layout / head layout (both raw sqlite3) "
        "| v11 layout (raw) / library | LIKE scan / library |",
        "|---|---|---|---|---|",
    ]
    for kind in KINDS:
        q = fig["queries"][kind]
        like = f"{q['like_vs_head']:.0f}x" if "like_vs_head" in q else ""
        lines.append(f"| {LABELS[kind]} | {q['vs_floor']:.2f}x | {q['inline_vs_floor']:.2f}x | "
                     f"{q['inline_vs_head']:.2f}x | {like} |")
    lines += ["", f"Targets: library / floor <= {FLOOR_TARGET}x; LIKE scan / 2-char CJK >= "
              f"{CJK_TARGET:.0f}x. Latencies are per-benchmark minima."]
    return "\n".join(lines) + "\n"


def chart(fig: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = list(KINDS)
    fig_, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.bar([LABELS[k] for k in kinds], [fig["queries"][k]["vs_floor"] for k in kinds],
             color="#4c72b0")
    left.axhline(FLOOR_TARGET, color="#c44e52", linestyle="--", label=f"target {FLOOR_TARGET}x")
    left.set_ylabel("library / raw sqlite3 floor")
    left.set_title("Query latency vs the floor (lower is better)")
    left.tick_params(axis="x", rotation=30)
    left.legend()
    st = fig["storage"]
    speedups = {"file size\ninline / head": st["inline_bytes"] / st["head_bytes"],
                "2-char CJK\nLIKE / library": fig["queries"]["cjk2"].get("like_vs_head", 0),
                "mixed\nv11 / library": fig["queries"]["mixed"]["inline_vs_head"]}
    right.bar(list(speedups), list(speedups.values()), color="#55a868")
    right.set_yscale("log")
    right.set_title("Head against the v11 layout (higher is better)")
    for i, value in enumerate(speedups.values()):
        right.annotate(f"{value:.1f}x", (i, value), ha="center", va="bottom")
    fig_.tight_layout()
    fig_.savefig(path, dpi=110)
    plt.close(fig_)


# --------------------------------------------------------------------------- scale benchmark

SCALE_LABELS = {"word": LABELS["word"], "phrase": LABELS["phrase"], "prefix": LABELS["prefix"],
                "substring": LABELS["substring"], "cjk1": "1-char CJK", "cjk2": LABELS["cjk2"],
                "mixed": LABELS["mixed"], "filtered": "word + source/role filters",
                "newest": "word, newest first"}
SCALE_LAYOUTS = {"head": "library (head)", "floor": "raw sqlite3 floor (head)",
                 "inline": "agent's v11 layout"}
SCALE_FLOOR_TARGET = 1.2


def scale_load(paths: list[Path]) -> dict[str, Any]:
    """The scale results of one or more runs: per size, kind and layout the minimum latency and
    every round's samples (runs appended one after the other)."""
    merged: dict[int, dict[str, Any]] = {}
    meta: dict[str, Any] = {"runs": len(paths)}
    for path in paths:
        data = json.loads(path.read_text())
        meta.update(sqlite=data["sqlite"], cpus=data["cpus"])
        meta["repeats"] = meta.get("repeats", 0) + data["repeats"]
        for size in data["sizes"]:
            entry = merged.setdefault(size["messages"], {**size, "latency": {}})
            for kind, layouts in size["latency"].items():
                for layout, stats in layouts.items():
                    best = entry["latency"].setdefault(kind, {}).get(layout)
                    if best is None:
                        entry["latency"][kind][layout] = dict(stats)
                        continue
                    best["min"] = min(best["min"], stats["min"])
                    for key in ("wall", "cpu"):
                        best[key] = best.get(key, []) + stats.get(key, [])
    meta["sizes"] = [merged[n] for n in sorted(merged)]
    return meta


def paired(lat: dict[str, Any], layout: str, baseline: str, key: str = "wall") -> float | None:
    """Median over rounds of ``layout``'s time over ``baseline``'s, from rounds both ran."""
    pairs = [a / b for a, b in zip(lat[layout].get(key, []), lat[baseline].get(key, []),
                                    strict=True) if a is not None and b is not None and b > 0]
    return statistics.median(pairs) if pairs else None


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _growth(first: float, last: float, corpus_ratio: float) -> str:
    """``t_last / t_first`` and the exponent ``k`` of ``t ~ n^k`` between the two sizes."""
    ratio = last / first
    return f"{ratio:.2f}x (k={math.log(ratio) / math.log(corpus_ratio):.2f})"


def scale_markdown(data: dict[str, Any]) -> str:
    sizes = data["sizes"]
    kinds = [k for k in SCALE_LABELS if k in sizes[0]["latency"]]
    lines = [
        f"SQLite {data['sqlite']}, {data['cpus']} CPU(s) shared with other work; per figure the "
        f"minimum over {data['repeats']} round(s) in {data['runs']} run(s), the three layouts "
        "run back to back in each round.",
        "",
        "| messages | text | head file | v11 file | head / v11 size |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in sizes:
        lines.append(f"| {s['messages']:,} | {s['text_bytes'] / 1e6:.0f} MB | "
                     f"{s['head_bytes'] / 1e6:.0f} MB | {s['inline_bytes'] / 1e6:.0f} MB | "
                     f"{s['head_bytes'] / s['inline_bytes']:.2f}x |")
    lines += ["", "Latency ratios: of the minima, then (in brackets) the median of per-round "
              "ratios in wall time / in CPU time. A **miss** (60k and up) is judged on the "
              "per-round wall ratios.", "",
              "| messages | query | library ms | floor ms | v11 ms | library / floor "
              f"(target <= {SCALE_FLOOR_TARGET}) | library / v11 (target <= 1) |",
              "|---:|---|---:|---:|---:|---|---|"]
    for s in sizes:
        for kind in kinds:
            lat = s["latency"][kind]
            head, floor, inline = (lat[x]["min"] for x in ("head", "floor", "inline"))
            vs_floor = paired(lat, "head", "floor") or head / floor
            vs_inline = paired(lat, "head", "inline") or head / inline
            missed = vs_floor > SCALE_FLOOR_TARGET or vs_inline > 1
            miss = " **miss**" if missed and s["messages"] >= 60_000 else ""
            cells = [f"{head / base:.2f}x ({_ratio(paired(lat, 'head', other))} / "
                     f"{_ratio(paired(lat, 'head', other, 'cpu'))})"
                     for base, other in ((floor, "floor"), (inline, "inline"))]
            lines.append(f"| {s['messages']:,} | {SCALE_LABELS[kind]} | {head * 1e3:.2f} | "
                         f"{floor * 1e3:.2f} | {inline * 1e3:.2f} | {cells[0]} | "
                         f"{cells[1]}{miss} |")
    if len(sizes) > 1:
        first, last = sizes[0], sizes[-1]
        corpus_ratio = last["messages"] / first["messages"]
        lines += ["", f"Growth from {first['messages']:,} to {last['messages']:,} messages "
                  f"({corpus_ratio:.0f}x the corpus): latency ratio and exponent k of "
                  "latency ~ messages^k (sublinear: k < 1).", "",
                  "| query | library | floor | v11 |", "|---|---:|---:|---:|"]
        for kind in kinds:
            cells = [_growth(first["latency"][kind][x]["min"], last["latency"][kind][x]["min"],
                             corpus_ratio) for x in ("head", "floor", "inline")]
            lines.append(f"| {SCALE_LABELS[kind]} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def scale_chart(data: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = data["sizes"]
    kinds = [k for k in SCALE_LABELS if k in sizes[0]["latency"]]
    xs = [s["messages"] for s in sizes]
    cols = 3
    rows = (len(kinds) + 1 + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.2 * rows), squeeze=False)
    colors = {"head": "#4c72b0", "floor": "#55a868", "inline": "#c44e52"}
    for ax, kind in zip(axes.flat, kinds, strict=False):
        for layout, label in SCALE_LAYOUTS.items():
            ax.plot(xs, [s["latency"][kind][layout]["min"] * 1e3 for s in sizes], marker="o",
                    color=colors[layout], label=label)
        ax.set_title(SCALE_LABELS[kind], fontsize=10)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylabel("ms")
    ax = axes.flat[len(kinds)]
    ax.plot(xs, [s["head_bytes"] / 1e6 for s in sizes], marker="o", color=colors["head"],
            label="head file")
    ax.plot(xs, [s["inline_bytes"] / 1e6 for s in sizes], marker="o", color=colors["inline"],
            label="v11 file")
    ax.plot(xs, [s["text_bytes"] / 1e6 for s in sizes], marker=".", color="#888888",
            linestyle="--", label="message text")
    ax.set_title("file size", fontsize=10)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylabel("MB")
    ax.legend(fontsize=7)
    for extra in list(axes.flat)[len(kinds) + 1:]:
        extra.axis("off")
    from matplotlib.ticker import NullFormatter

    for ax in axes.flat:
        if ax.has_data():
            ax.set_xlabel("messages")
            ax.set_xticks(xs)
            ax.set_xticklabels([f"{x // 1000}k" for x in xs])
            ax.xaxis.set_minor_formatter(NullFormatter())
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("Search latency (minimum) and file size against corpus size, log-log")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def scale_report(paths: list[Path], stem: Path) -> str:
    """Write ``stem`` as .md and .png from the scale results in ``paths``; returns the md."""
    data = scale_load(paths)
    table = scale_markdown(data)
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(f"{stem}.md").write_text(table)
    try:
        scale_chart(data, Path(f"{stem}.png"))
    except ModuleNotFoundError as err:  # the tables stand alone; the chart needs matplotlib
        print(f"no chart: {err}", file=sys.stderr)
    return table


# --------------------------------------------------------------------------- append rates

APPEND_TARGETS = {"floor": 0.8, "inline": 2.0}


def append_markdown(paths: list[Path]) -> str:
    """Append rates of test_bench_append.py as ratios: of the fastest rounds (over all files),
    and the medians of the per-round ratios (each round runs the layouts back to back), in wall
    time and in CPU time."""
    seconds: dict[str, dict[str, list[float]]] = {"seconds": {}, "cpu_seconds": {}}
    messages = 0
    for path in paths:
        for bench in json.loads(path.read_text())["benchmarks"]:
            extra = bench.get("extra_info", {})
            if extra.get("kind") == "append-rates":
                messages = extra["messages"]
                for key, per_layout in seconds.items():
                    for layout, values in extra.get(key, {}).items():
                        per_layout.setdefault(layout, []).extend(values)
    wall, cpu = seconds["seconds"], seconds["cpu_seconds"]

    def per_round(times: dict[str, list[float]], layout: str, baseline: str) -> str:
        if not times.get(layout):
            return "-"
        pairs = zip(times[layout], times[baseline], strict=True)
        return f"{statistics.median(b / t for t, b in pairs):.2f}x"

    def row(label: str, layout: str, baseline: str, target: str) -> str:
        """``layout``'s append rate over ``baseline``'s (the inverse ratio of their times)."""
        fastest = min(wall[baseline]) / min(wall[layout])
        return (f"| {label} | {fastest:.2f}x | {per_round(wall, layout, baseline)} | "
                f"{per_round(cpu, layout, baseline)} | {target} |")

    cpu_each = " / ".join(f"{layout} {statistics.median(v) / messages * 1e6:.0f} us"
                          for layout, v in cpu.items()) if cpu else "-"
    return "\n".join([
        f"Appends of {messages} realistic messages, one transaction each, at the library's "
        f"durability; {len(wall['head'])} round(s) in {len(paths)} run(s), the layouts back "
        f"to back in each round. Median CPU time an append: {cpu_each}.", "",
        "| append rate | fastest rounds | per-round median, wall | per-round median, CPU "
        "| target |",
        "|---|---:|---:|---:|---:|",
        row("library / raw sqlite3, same statements", "head", "floor",
            f">= {APPEND_TARGETS['floor']}x"),
        row("library / agent's v11 store", "head", "inline", f">= {APPEND_TARGETS['inline']}x"),
        row("raw sqlite3 on head / agent's v11 store", "floor", "inline", "-"),
    ]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--scale", action="store_true",
                        help="the files are scale.py results: write scale-<label>.{md,png}")
    parser.add_argument("--label", default="latest")
    parser.add_argument("--append", action="store_true",
                        help="the files are test_bench_append.py results: print their ratios")
    args = parser.parse_args(argv)
    if args.append:
        print(append_markdown(args.results))
        return
    if args.scale:
        print(scale_report(args.results, args.out / f"scale-{args.label}"))
        return
    fig = figures(load(args.results))
    fig["runs"] = len(args.results)
    args.out.mkdir(parents=True, exist_ok=True)
    table = markdown(fig)
    (args.out / "figures.md").write_text(table)
    (args.out / "figures.json").write_text(json.dumps(fig, indent=2))
    chart(fig, args.out / "figures.png")
    print(table)


if __name__ == "__main__":
    main()
