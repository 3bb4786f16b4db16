"""Benchmark: ``pipeline.compare`` on real reruns of one sweep: false alarms and a planted change.

1. Runs the same sweep N times, one after another, each into its own dataset folder
   (``python -m pipeline.run --multirun workload=... variant=... scale=... hydra/launcher=local
   dataset_dir=OUT/run-<k>``), recording its wall time and the load average around it. A folder
   that already holds every execution of the selection is kept (``--reuse``), so an interrupted
   series can be resumed.
2. Compares every pair of runs (earlier as BASE): how many comparisons exit 1, and which times
   they flag; with ``--history``, each comparison also gets every other run as BASE's history
   (``pipeline.compare --history``: each time's own run-to-run noise).
3. Plants a change: for every execution in turn, a copy of run 1 with that execution's window
   times x ``--factor`` (the parquet rewritten, its metadata kept) against run 1 itself, and
   against run 2 with that execution scaled in it (the same change under real run-to-run noise;
   with ``--history``, runs 3 to N as run 1's history): is it caught (a time of it ``slower``), and
   is anything else flagged?
4. With ``--contend K``, run K is measured while other work runs on the host: one CPU-burning
   process per core, started before its sweep and stopped (by its process id) after it. The shards
   record the contention; every comparison with run K should report the executions whose contention
   differs as ``inconclusive``, not ``slower`` (the summary counts them), and exit 0.

    python benchmarks/compare_reruns.py OUT [--reruns 6] [--scale cpu] [--factor 1.3]
        [--workloads inference-ep8-f1536,packing-ep32-f3072-profile-a] [--variants 'glob(*)']
        [--reuse] [--history] [--contend K] [--json FILE]

Run it on a quiet machine: a comparison reports what the machine did, and on a loaded one the
reruns really differ. The figures go in docs/compare.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline import REPO_ROOT
from pipeline.data.dataset import Dataset
from pipeline.data.schema import METADATA_KEY
from pipeline.tools.compare import any_slower, compare, load

DEFAULT_WORKLOADS = "inference-ep8-f1536,packing-ep32-f3072-profile-a"


def sweep(dataset: Path, workloads: str, variants: str, scale: str, contend: bool = False) -> dict[str, Any]:
    """One run of the sweep into ``dataset``: its wall time and the load average before and after;
    ``contend``: with one CPU-burning process per core running beside it."""
    command = [
        sys.executable,
        "-m",
        "pipeline.run",
        "--multirun",
        f"workload={workloads}",
        f"variant={variants}",
        f"scale={scale}",
        "hydra/launcher=local",
        f"dataset_dir={dataset}",
    ]
    burners = (
        [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
        if contend
        else []
    )
    load_before = os.getloadavg()
    start = time.perf_counter()
    try:
        run = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True)
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    wall = time.perf_counter() - start
    if run.returncode != 0:
        raise SystemExit(f"sweep into {dataset} failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
    return {
        "dataset": str(dataset),
        "contended": contend,
        "wall_s": wall,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }


def scaled_copy(dataset: Path, to: Path, execution_id: str, factor: float) -> Path:
    """A copy of ``dataset``'s shards with one execution's window times x ``factor``."""
    if to.exists():
        shutil.rmtree(to)
    shutil.copytree(dataset / "shards", to / "shards")
    for path in sorted(Dataset(to).shard_dir(execution_id).glob("*.parquet")):
        table = pq.read_table(path)
        meta = table.schema.metadata[METADATA_KEY]
        column = table.schema.get_field_index("window_ms")
        table = table.set_column(
            column, table.schema.field(column), pc.multiply(table.column(column), factor)
        )
        pq.write_table(table.replace_schema_metadata({METADATA_KEY: meta}), path)
    return to


def judged(base: Path, new: Path, history: list[Path] | None = None) -> dict[str, Any]:
    """One comparison, in-process: exit status, the times flagged, the bounds and noise strata."""
    document = compare(load(base), load(new), 0.05, history=[load(h) for h in history or []])
    return {
        "base": str(base),
        "new": str(new),
        "exit": int(any_slower(document)),
        "slower": sorted(
            {(t["execution_id"], t["metric"]) for t in document["times"] if t["change"] == "slower"}
        ),
        "faster": sorted(
            {(t["execution_id"], t["metric"]) for t in document["times"] if t["change"] == "faster"}
        ),
        "inconclusive": sorted(
            (t["execution_id"], t["metric"], t["measured"], t["conditions"])
            for t in document["times"]
            if t["change"] == "inconclusive"
        ),
        "bounds": document["bounds"]["times"],
        "noise": document["noise"],
        "document": document,
    }


def planted(
    base: Path, new: Path, out: Path, factor: float, history: list[Path] | None = None
) -> list[dict[str, Any]]:
    """Every execution of ``new`` in turn x ``factor`` (in a copy), compared against ``base``."""
    results = []
    for execution_id in sorted(load(new).rows):
        copy = scaled_copy(new, out / execution_id, execution_id, factor)
        result = judged(base, copy, history)
        flagged = {i for i, _ in result["slower"]}
        results.append(
            {
                "execution_id": execution_id,
                "caught": execution_id in flagged,
                "others_flagged": sorted(flagged - {execution_id}),
                "bounds": [
                    (t["metric"], t["bound"])
                    for t in result["document"]["times"]
                    if t["execution_id"] == execution_id
                ],
            }
        )
        shutil.rmtree(copy)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the runs (run-1 ... run-N) and the copies")
    parser.add_argument("--reruns", type=int, default=6)
    parser.add_argument("--workloads", default=DEFAULT_WORKLOADS)
    parser.add_argument("--variants", default="glob(*)")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--factor", type=float, default=1.3)
    parser.add_argument(
        "--reuse", action="store_true", help="keep a run folder that already has every execution"
    )
    parser.add_argument(
        "--history", action="store_true", help="give each comparison the other runs as BASE's history"
    )
    parser.add_argument(
        "--contend", type=int, default=None, metavar="K", help="run K beside one CPU-burning process per core"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.reruns < 2:
        parser.exit(2, f"--reruns must be >= 2 to compare anything, got {args.reruns}\n")
    args.out.mkdir(parents=True, exist_ok=True)
    runs: list[Path] = []
    sweeps: list[dict[str, Any]] = []
    for k in range(1, args.reruns + 1):
        dataset = args.out / f"run-{k}"
        if args.reuse and _usable(dataset, runs[0] if runs else None):
            print(f"run {k}: kept {dataset}", file=sys.stderr)
        else:
            if dataset.exists():
                shutil.rmtree(dataset)
            info = sweep(dataset, args.workloads, args.variants, args.scale, contend=k == args.contend)
            sweeps.append(info)
            print(
                f"run {k}: {info['wall_s']:.0f} s, load average {info['load_before'][0]:.1f} before, "
                f"{info['load_after'][0]:.1f} after",
                file=sys.stderr,
            )
        runs.append(dataset)
    pairs = [
        judged(a, b, [r for r in runs if r not in (a, b)] if args.history else None)
        for a, b in itertools.combinations(runs, 2)
    ]
    copies = planted(runs[0], runs[0], args.out / "copies", args.factor)
    reruns = planted(runs[0], runs[1], args.out / "copies", args.factor, runs[2:] if args.history else None)
    executions = len(copies)
    summary = {
        "reruns": len(runs),
        "executions": executions,
        "comparisons": len(pairs),
        "comparisons_exit_1": sum(p["exit"] for p in pairs),
        "times_slower": sum(len(p["slower"]) for p in pairs),
        "times_faster": sum(len(p["faster"]) for p in pairs),
        "times_inconclusive": sum(len(p["inconclusive"]) for p in pairs),
        "inconclusive_measured_slower": sum(m == "slower" for p in pairs for _, _, m, _ in p["inconclusive"]),
        "comparisons_flagging_any": sum(bool(p["slower"] or p["faster"]) for p in pairs),
        "times_compared": sum(len(p["document"]["times"]) for p in pairs),
        "copy_caught": sum(c["caught"] for c in copies),
        "copy_others_flagged": sum(bool(c["others_flagged"]) for c in copies),
        "rerun_caught": sum(c["caught"] for c in reruns),
        "rerun_others_flagged": sum(bool(c["others_flagged"]) for c in reruns),
        "factor": args.factor,
        "history": args.history,
    }
    for p in pairs:
        b = p["bounds"]
        print(
            f"{Path(p['base']).name} vs {Path(p['new']).name}: exit {p['exit']}, bounds x{b['low']:.3f} - "
            f"x{b['high']:.3f} (median x{b['median']:.3f}), slower {p['slower']}, faster {p['faster']}, "
            f"inconclusive {len(p['inconclusive'])}"
        )
    for label, results in (("copy of run 1", copies), ("in run 2", reruns)):
        for c in results:
            bounds = " ".join(f"{m}<x{v:.2f}" for m, v in c["bounds"] if v is not None)
            print(
                f"x{args.factor:g} {label}: {c['execution_id']}: {'caught' if c['caught'] else 'missed'}"
                f"{', others flagged ' + str(c['others_flagged']) if c['others_flagged'] else ''} ({bounds})"
            )
    print(json.dumps(summary))
    if args.json:
        for p in pairs:
            del p["document"]
        args.json.write_text(
            json.dumps(
                {"summary": summary, "sweeps": sweeps, "pairs": pairs, "copies": copies, "reruns": reruns},
                indent=1,
                default=str,
            )
        )
    passed = (
        summary["comparisons_exit_1"] == 0
        and summary["copy_caught"] >= 0.9 * executions
        and summary["copy_others_flagged"] == 0
    )
    print(
        "verdict: "
        + ("as required" if passed else "NOT as required")
        + " (0 of the pairs exit 1; the planted "
        f"x{args.factor:g} caught in >= 90% of the copies, nothing else flagged)"
    )
    return 0 if passed else 1


def _usable(dataset: Path, first: Path | None) -> bool:
    """A dataset folder with the executions of ``first`` (any executions for the first run)."""
    try:
        rows = load(dataset).rows
    except ValueError:
        return False
    return first is None or set(rows) == set(load(first).rows)


if __name__ == "__main__":
    sys.exit(main())
