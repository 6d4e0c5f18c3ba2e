"""Turn a pytest-benchmark JSON into the README table (markdown) and a PNG chart of ratios.

    python -m benchmarks.report RESULTS.json [MORE.json ...] [--out benchmarks/results]

Latencies use each benchmark's minimum (over all the result files given): the least-disturbed
run is the best estimate of the cost itself on a shared machine. Every figure is reported as a
ratio to a baseline.
"""

from __future__ import annotations

import argparse
import json
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="+")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
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
