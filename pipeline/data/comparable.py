"""The comparable settings of a dataset: what all of its executions share, so that their times pair.

They are the suite, the scale and every one of its keys, the ranks cap, the seed and the cluster
preset, named as the command line sets them (``suite``, ``scale.tokens``, ``seed``). The suite's value
is its definition (:meth:`pipeline.matrix.suite.Suite.definition`: every workload and variant written
out), shown as its name and digest (``seed-003@1a2b3c4d``), so that a dataset keeps the suite it was
swept with wherever its file went, and every command reads the suite from the dataset
(:meth:`Comparable.suite`); a config or record of before suites holds the report's. The first sweep
into a dataset fixes them (its intent in the ledger, :mod:`pipeline.data.ledger`): the plan refuses a
sweep or a resubmission set otherwise, the scan of the shards skips a shard that recorded other
values, ``report.html`` shows each of them and the comparison of two datasets lists those that
differ. They are read from a
composed config, which the plan holds and every shard records as it ran, so both read them one way.

The device word (``auto``, ``cpu``, ``cuda``) is not one of them: it is a request that the job's node
resolves, and the device that ran is what each shard records (``device``, shown beside these).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline.matrix import REPORT, Suite
from pipeline.matrix.suite import is_suite

LOCAL_CLUSTER = "local"  # the cluster preset of the local launcher, which takes none
SCALE_KEYS = (
    "tokens",
    "d_model",
    "d_ff_divisor",
    "num_experts",
    "top_k",
    "num_shared",
    "dtype",
    "warmup",
    "windows",
    "iterations",
    "min_window_ms",
    "min_timed_ms",
)
KEYS = ("suite", "scale", *(f"scale.{k}" for k in SCALE_KEYS), "max_ranks", "seed", "cluster")
_ABSENT = object()


@dataclass(frozen=True)
class Comparable:
    """The comparable settings one config holds: key (of ``KEYS``) -> value, for the keys it records
    (a config written by hand may lack some: they read as unknown)."""

    values: dict[str, Any]

    def __post_init__(self) -> None:
        unknown = sorted(set(self.values) - set(KEYS))
        if unknown:
            raise ValueError(
                f"unknown comparable setting(s) {', '.join(unknown)}; allowed: {', '.join(KEYS)}"
            )
        if "suite" not in self.values:  # recorded before suites: the report's
            object.__setattr__(self, "values", {"suite": REPORT.definition(), **self.values})

    @classmethod
    def of_config(cls, config: Mapping[str, Any]) -> Comparable:
        """The comparable settings of a composed config (a job's, or one a shard recorded)."""
        scale = config.get("scale")
        scale = scale if isinstance(scale, Mapping) else {}
        values: dict[str, Any] = {"suite": _definition(config.get("suite", REPORT.definition()))}
        values["scale"] = scale.get("name", _ABSENT)
        values.update({f"scale.{k}": scale.get(k, _ABSENT) for k in SCALE_KEYS})
        values["max_ranks"] = config.get("max_ranks", _ABSENT)
        values["seed"] = config.get("seed", _ABSENT)
        if "cluster" in config:
            cluster = config["cluster"]
            values["cluster"] = cluster.get("name") if isinstance(cluster, Mapping) else LOCAL_CLUSTER
        return cls({k: v for k, v in values.items() if v is not _ABSENT})

    def value(self, key: str) -> Any:
        """The value of ``key``, None where not recorded."""
        return self.values.get(key)

    @property
    def suite(self) -> Suite:
        """The suite these settings hold; a ValueError where its recorded definition is none."""
        try:
            return Suite.of(self.values["suite"])
        except ValueError as err:
            raise ValueError(f"the recorded suite cannot be read: {err}") from None

    def differing(self, fixed: Comparable) -> list[str]:
        """The keys, in ``KEYS`` order, whose values here are not those of ``fixed``."""
        return [k for k in KEYS if not _same(self.values.get(k, _ABSENT), fixed.values.get(k, _ABSENT))]

    def differences(self, fixed: Comparable) -> str:
        """``scale.tokens=32 (the dataset's: 16), seed=1 (the dataset's: 0)``: what differs from ``fixed``."""
        return ", ".join(
            f"{k}={text(self.values.get(k))} (the dataset's: {text(fixed.values.get(k))})"
            for k in self.differing(fixed)
        )

    def assignments(self) -> str:
        """``scale=ci scale.tokens=16 ... seed=0``: these settings as command-line overrides."""
        return " ".join(f"{k}={text(self.values[k])}" for k in KEYS if k in self.values)


def text(value: Any) -> str:
    """A setting's value as the command line writes it (``null`` for None; a suite by its name and
    digest)."""
    if value is None:
        return "null"
    if is_suite(value):
        try:
            return Suite.of(value).label
        except ValueError:
            return "an unreadable suite"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _same(a: object, b: object) -> bool:
    """Equal as settings: 20 and 20.0 alike (YAML writes either), absent only as absent."""
    if a is _ABSENT or b is _ABSENT:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return a == b


def _definition(node: object) -> object:
    """A suite node's definition, or the node as it is where it is none (it then differs from every
    dataset's: an unreadable suite is never one of them)."""
    try:
        return Suite.of(node).definition() if isinstance(node, Mapping) else node
    except ValueError:
        return node
