"""``python -m pipeline.run``: the ci sweep end to end, bad overrides, and a failing execution."""

import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from pipeline.bench.kernels import MX_METHODS
from pipeline.data import ledger
from pipeline.data.codec import encode
from pipeline.data.dataset import Dataset
from pipeline.data.reader import read_shard
from pipeline.data.schema import METADATA_KEY, SCHEMA_VERSION
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.matrix.assumptions import ASSUMPTIONS
from pipeline.report.deviations import deviations


def run(*arguments: str, timeout: int = 600, plant: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.run", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "MOE_BENCH_PLANT": plant},
    )


def slowest_rank_median(rows: list[dict], phase: str) -> float:
    """The report's reduction, written out: per rank the median of window_ms / iterations, then the max."""
    ranks = sorted({r["rank"] for r in rows})
    return max(
        statistics.median(
            r["window_ms"] / r["iterations"] for r in rows if r["rank"] == k and r["phase"] == phase
        )
        for k in ranks
    )


def nothing_launched(dataset: Path) -> bool:
    return not any((dataset / name).exists() for name in ("ledger", "ledger.jsonl", "shards", "logs"))


@pytest.mark.slow
def test_ci_sweep_writes_one_complete_shard_per_execution(ci_sweep):
    tmp_path, done = ci_sweep
    lines = done.stdout.splitlines()
    assert lines[-1] == "10 executions: 10 done, 0 failed"
    # a start and an end line per execution, each with the counts, the elapsed time and an ETA
    starts = [line.split() for line in lines if line.startswith("start ")]
    ends = [line.split() for line in lines if line.startswith("done ")]
    assert len(lines) == 21 and len(starts) == len(ends) == 10
    assert [w[1] for w in starts] == [w[1] for w in ends] and len({w[1] for w in ends}) == 10
    assert re.search(
        r"\[10/10 ended: 10 done, 0 failed, 0 running; \d\d:\d\d:\d\d elapsed, ETA 00:00:00\]$", lines[-2]
    )
    assert re.search(
        r"\[0/10 ended: 0 done, 0 failed, 1 running; \d\d:\d\d:\d\d elapsed, ETA \?\]$", lines[0]
    )
    stamps = [m[1] for m in (re.search(r"; (\d\d:\d\d:\d\d) elapsed, ETA", x) for x in lines) if m]
    assert len(stamps) == 20 and stamps == sorted(stamps)  # every progress line, in the order of time
    progress = {w[1]: w for w in ends}
    shards = sorted(tmp_path.glob("shards/execution=*/attempt-*.parquet"))
    assert len(shards) == 10
    everything = [r.to_json() for r in ledger.read(Dataset(tmp_path))]
    # the sweep's intent first, one record naming all ten executions, then the attempts' records
    intent, *records = everything
    assert intent["event"] == "intended" and len(intent["executions"]) == 10
    assert all(r["event"] != "intended" for r in records)
    for path in shards:
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[METADATA_KEY])
        rows = table.to_pylist()
        execution_id = path.parent.name.removeprefix("execution=")
        workload = EXECUTION_BY_ID[execution_id].workload
        assert meta["config"]["workload"] == workload.name and meta["config"]["suite"]["name"] == "report"
        phases = (
            ["forward", "backward", "combined"] if workload.kind == "packing" else ["forward", "combined"]
        )
        shape, plan = meta["shape"], meta["timing"]["plan"]
        assert (meta["schema_version"], meta["execution_id"], meta["attempt"]) == (
            SCHEMA_VERSION,
            execution_id,
            1,
        )
        assert (shape["ranks"], shape["ep"], plan["windows"], plan["min_window_ms"]) == (
            2,
            workload.ep,
            5,
            20,
        )
        # iterations per window: the scale's 2, or more until a combined window lasts 20 ms
        iterations = plan["iterations"]
        assert (
            iterations >= 2
            and meta["timing"]["requested"]["iterations"] == 2 == meta["config"]["scale"]["iterations"]
        )
        keys = sorted((r["rank"], r["phase"], r["window"]) for r in rows)
        assert keys == sorted((k, p, w) for k in range(2) for p in phases for w in range(5))
        assert {(r["execution_id"], r["attempt"], r["ranks"], r["iterations"]) for r in rows} == {
            (execution_id, 1, 2, iterations)
        }
        # rank 0's layers received f x the balanced T x K rows, by the layers' own count
        balanced = shape["nominal_tokens"] * shape["top_k"]
        evidence = meta["saved_state"]
        assert [s["routed_rows"] for s in evidence] == [round(f * balanced) for f in workload.layer_loads]
        mok = EXECUTION_BY_ID[execution_id].variant.implementation == "mok"
        # budgets in units of the nominal T x K: MoK rounds 2.5 up to a power of two of rows (256 / 96)
        assert [s["factor"] for s in evidence] == pytest.approx([256 / 96 if mok else 2.5] * len(evidence))
        if workload.kind == "packing":
            recomputing = [s["layer"] for s in evidence if s["recomputed_rows"] > 0]
            if mok:
                assert recomputing == [0, 2]  # profile A's 7.5x and 4.5x layers exceed MoK's budget
            else:
                assert recomputing == [] and not any(s["capacity_flag"] for s in evidence)
        assert meta["nvlink"]["tx_bytes_per_s"] is None and "no CUDA device" in meta["nvlink"]["reason"]
        assert meta["memory"]["peak_rss_bytes"] > 0 and meta["memory"]["peak_allocated_bytes"] is None
        provenance = meta["provenance"]
        assert (provenance["backend"], provenance["collective"]) == ("local", "gloo") and provenance[
            "versions"
        ]["torch"]
        assert meta["kernels"]["gemm"] == "torch" and 0 <= meta["contention"]["cpu_wait_share"] < 1
        assert re.fullmatch(r"[0-9a-f]{40}", provenance["git_sha"]) and len(provenance["hosts"]) == 1
        assert provenance["job_ids"] == [rows[0]["job_id"]]
        # the progress line: id, the slowest-rank median iteration time, the shard
        line = progress[execution_id]
        assert float(line[2]) == pytest.approx(slowest_rank_median(rows, "combined"), abs=5e-4)
        assert line[3:5] == ["ms/iteration", str(path)]
        events = [r["event"] for r in records if r["execution_id"] == execution_id]
        assert events == ["submitted", "started", "finished"]
        (submitted,) = [r for r in records if r["execution_id"] == execution_id and r["event"] == "submitted"]
        assert submitted["overrides"][0] == f"workload={workload.name}"
        assert submitted["overrides"][2:] == ["scale=ci", f"dataset_dir={tmp_path}"]
        assert submitted["log_dir"] == f"logs/{execution_id}/attempt-1"  # relative: the dataset can move
    _published_json_says_what_ran(shards)


def _published_json_says_what_ran(shards: list[Path]) -> None:
    """What the published JSON's meta says of these real scale=ci shards (``meta.assumptions`` and
    ``meta.deviations`` as aggregation encodes them, without its full-scale estimates): the six shapes
    the report does not name, and every way these executions ran otherwise than the report's."""
    ran = sorted(p.parent.name.removeprefix("execution=") for p in shards)
    assumed = {a["what"]: set(a["executions"]) for a in encode(ASSUMPTIONS)}
    six = assumed["imbalanced inference and training"] | assumed["balanced packing"]
    assert len(six) == 30 and len({EXECUTION_BY_ID[e].workload.name for e in six}) == 6
    found = {d["what"]: d for d in encode(deviations(read_shard(p) for p in shards))}
    mx = [e for e in ran if EXECUTION_BY_ID[e].variant.precision == "mxfp8"]
    # imbalanced shapes on 2 of EP ranks: rank 0 is fed T' > T tokens to keep its routed load
    hot = [e for e in ran if max(EXECUTION_BY_ID[e].workload.layer_loads) > 1]
    assert len(mx) == 6 and len(hot) == 5
    for what, value, executions in (
        ("dtype", "float32 (10)", ran),
        ("collective", "gloo (10)", ran),
        ("grouped GEMM", "torch (10)", ran),
        ("ranks", "2 of EP ranks (gloo all-to-all, 2 ranks on one node) (10)", ran),
        ("MXFP8 products", f"{MX_METHODS['torch']} (6)", mx),
        ("tracked rank's tokens", None, hot),
    ):
        assert sorted(found[what]["executions"]) == executions, (what, found[what])
        assert value is None or found[what]["ran"] == value, (what, found[what]["ran"])
    tokens = found["tracked rank's tokens"]["ran"]
    assert tokens.startswith("rank 0 fed up to "), tokens


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            ["workload=inference-ep8-f1536,inference-ep4-f1536", "variant=mok-bf16"],
            "workload 'inference-ep4-f1536' is not in suite report; allowed workload: ",
        ),
        (
            ["workload=inference-ep8-f1536", "variant=mok-bf16,mok-int4"],
            "variant 'mok-int4' is not in suite report; allowed variant: ",
        ),
        pytest.param(
            ["workload=inference-ep8-f1536,training-ep64-f3072", "variant=mok-bf16", "scale.num_experts=96"],
            "cannot hold EP64: num_experts 96 is not a multiple of 64",
            marks=pytest.mark.slow,
        ),
        (
            ["workload=packing-ep64-f3072-profile-a", "variant=mok-bf16", "scale.num_experts=256"],
            "cannot realize load 7.5 of packing-ep64-f3072-profile-a on 2 rank(s)",
        ),
    ],
)
def test_bad_overrides_fail_before_anything_is_launched(tmp_path, arguments, expected):
    done = run("--multirun", *arguments, "scale=ci", f"dataset_dir={tmp_path}", timeout=120)
    assert done.returncode != 0
    assert expected in done.stderr
    assert nothing_launched(tmp_path)


@pytest.mark.slow
def test_a_failed_execution_exits_non_zero_and_names_its_log(tmp_path):
    # An error planted on rank 0 as the execution's gate begins (pipeline.bench.plants).
    done = run(
        "workload=inference-ep8-f1536",
        "variant=mok-bf16",
        "scale=ci",
        f"dataset_dir={tmp_path}",
        timeout=300,
        plant="error:inference-ep8-f1536-bf16-mok-native:0",
    )
    log = tmp_path / "logs" / "inference-ep8-f1536-bf16-mok-native" / "attempt-1"
    assert done.returncode == 1
    (failed,) = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    assert failed.startswith(
        "FAILED  inference-ep8-f1536-bf16-mok-native  PlantedError: planted error on rank 0"
    )
    assert f"  log: {log}  [1/1 ended: 0 done, 1 failed, 0 running;" in failed
    assert done.stdout.splitlines()[-1] == "1 executions: 0 done, 1 failed"
    assert not list(tmp_path.glob("shards/**/*.parquet"))
    assert [r.event for r in ledger.read(Dataset(tmp_path))][-1] == "failed"
    assert log.is_dir()


@pytest.mark.slow
def test_each_job_leaves_hydras_output_and_its_callbacks_fire(tmp_path):
    events = tmp_path / "events.txt"
    done = run(
        "--multirun",
        "workload=inference-ep8-f1536",
        "variant=mok-bf16,dist-moe-bf16",
        "scale=ci",
        f"dataset_dir={tmp_path / 'data'}",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "hydra.sweep.subdir=job-${hydra.job.num}",
        "+hydra.callbacks.record._target_=tests.hydra_callbacks.RecordJobs",
        f"+hydra.callbacks.record.path={events}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(events.read_text().splitlines()) == [
        "end:COMPLETED 0 inference-ep8-f1536 mok-bf16",
        "end:COMPLETED 1 inference-ep8-f1536 dist-moe-bf16",
        "start 0 inference-ep8-f1536 mok-bf16",
        "start 1 inference-ep8-f1536 dist-moe-bf16",
    ]
    for num, (variant, execution_id) in enumerate(
        [("mok-bf16", "bf16-mok-native"), ("dist-moe-bf16", "bf16-dist-moe-bf16")]
    ):
        job = tmp_path / "sweep" / f"job-{num}"
        overrides = ["workload=inference-ep8-f1536", f"variant={variant}", "scale=ci"]
        assert yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())[:3] == overrides
        config = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
        assert config["dataset_dir"] == str(tmp_path / "data") and "hydra" not in config
        assert (config["variant"], config["suite"]["name"]) == (variant, "report")
        # the attempt's folder, which links to the folder of the job its group ran in
        attempt = tmp_path / "data" / "logs" / f"inference-ep8-f1536-{execution_id}" / "attempt-1"
        logs = (job / "logs").resolve()
        assert logs == attempt.resolve() and logs.parent == tmp_path / "data" / "logs" / "arrays"
        assert list(logs.glob("*_0_log.out"))
    assert (tmp_path / "sweep" / "multirun.yaml").is_file()
