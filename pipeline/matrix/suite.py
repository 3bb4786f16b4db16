"""A suite: the workloads and variants one dataset sweeps, what it publishes and how it is checked.

A suite is configuration (``conf/suite/<name>.yaml``, or a YAML file of one's own in a folder given
with ``--config-dir``), composed into a config's ``suite`` node and read here, every field checked,
into a :class:`Suite`. Its executions are every workload with every variant. The report's 110 are
``suite=report`` (:data:`REPORT`); seed 003's token-repeat forward is ``suite=seed-003``.

The file's keys (``docs/suites.md`` shows examples):

- ``name``: the suite's name, a plain word.
- ``publishes``: besides the executions' rows, ``pairs`` (each Dist-MoE execution against the MoK one
  of its matched workload, the report's) and / or ``cases`` (each execution's output check and its
  time against the speed of light).
- ``check``: the correctness gate before timing: ``slice`` (a ragged slice of fresh tokens against a
  float64 token-repeat reference, the report's) or ``case`` (that, and then every rank's own input of
  the timed forward against the naive token-repeat formulation).
- ``shape``: defaults for the workloads' fields.
- ``workloads``: entries of ``kind``, ``ep``, ``d_ff``, ``imbalance`` (inference and training) or
  ``profile`` (packing: balanced, a, b), ``tokens``, ``d_model``, ``num_experts``, ``top_k`` and
  ``num_shared``, each given here or in ``shape``, at full scale; a list of values makes one workload
  per value (a product over the lists, in the entry's order of keys).
- ``variants``: ``all`` (every variant of every registered implementation, the report's), or entries:
  a variant's name (``mok-bf16``), or ``implementation`` with optional ``precision`` and ``pipeline``
  (every one of them that exists where left out).
- ``assumptions``: the suite's own choices, each ``what``, ``choice`` and the ``workloads`` it touches
  (a glob over their names, or a list of them; all where left out), published with the dataset.

Every problem is a ValueError of one line naming the field (``suite mixtral: workloads[0].ep``) and
what is allowed, before anything is launched. A suite's **definition** (:meth:`Suite.definition`) is
its canonical form: every workload and variant written out (but ``all``, which stays the registry's
variants: an implementation registered later joins the suite's matrix, as it joins the report's), so
that two files that say the same say it identically; a dataset records it with its comparable
settings, and every command reads the suite from there.
"""

from __future__ import annotations

import fnmatch
import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache, lru_cache
from typing import Any

import yaml

from pipeline import CONFIG_DIR
from pipeline.base.folders import cut, shown
from pipeline.base.implementations import implementation, implementations
from pipeline.base.vocabulary import KINDS, MX_BLOCK
from pipeline.matrix.cells import PROFILES, REFERENCE, Execution, Variant, Workload

PUBLISHES = ("pairs", "cases")
CHECKS = ("slice", "case")
KEYS = ("name", "publishes", "check", "shape", "workloads", "variants", "assumptions")
WORKLOAD_FIELDS = tuple(f for f in Workload.__dataclass_fields__)
REQUIRED = ("kind", "ep", "d_ff", *REFERENCE)
VARIANT_FIELDS = ("implementation", "precision", "pipeline")
ASSUMPTION_FIELDS = ("what", "choice", "workloads")
ALL = "all"
# Upper bounds of a workload's full-scale fields, and why: a typo must be refused before it runs.
LIMITS: dict[str, tuple[int, str]] = {
    "ep": (1024, "1,024 ranks"),
    "d_ff": (49_152, "8x the report's largest F"),
    "tokens": (131_072, "64x the report's T = 2,048 tokens per GPU"),
    "d_model": (57_344, "8x the report's D = 7,168"),
    "num_experts": (3_072, "8x the report's E = 384"),
    "top_k": (48, "8x the report's K = 6"),
    "num_shared": (8, "8x the report's one shared expert"),
}
_WORD = re.compile(r"[a-z0-9][a-z0-9-]*")


@dataclass(frozen=True)
class SuiteAssumption:
    """A choice a suite makes: what it concerns, the choice, and the workloads it touches (by name)."""

    what: str
    choice: str
    workloads: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    """A checked suite; construct it with :meth:`of`."""

    name: str
    publishes: tuple[str, ...]
    check: str
    workloads: tuple[Workload, ...]
    variants: tuple[Variant, ...]
    assumptions: tuple[SuiteAssumption, ...] = ()
    every_variant: bool = False  # ``variants: all``: the registry's, whatever this process registers

    @staticmethod
    def of(node: Mapping[str, Any]) -> Suite:
        """The suite a config's ``suite`` node (or a recorded definition) describes; a one-line
        ValueError names what is wrong."""
        return _parsed(json.dumps(node if isinstance(node, dict) else _plain(node), sort_keys=True))

    @property
    def executions(self) -> tuple[Execution, ...]:
        """Every workload with every variant, in the suite's order."""
        return _executions(self)

    @property
    def by_id(self) -> dict[str, Execution]:
        """Its executions by id (a copy: callers may keep it)."""
        return dict(_by_id(self))

    def execution(self, execution_id: str) -> Execution | None:
        """Its execution of that id, or None."""
        return _by_id(self).get(execution_id)

    def workload_names(self) -> list[str]:
        return [w.name for w in self.workloads]

    def variant_names(self) -> list[str]:
        return [v.name for v in self.variants]

    def execution_of(self, cfg: Mapping[str, Any]) -> Execution:
        """The execution a composed config names (its ``workload`` and ``variant``); a ValueError
        lists the suite's names otherwise."""
        workload = _named("workload", cfg.get("workload"), {w.name: w for w in self.workloads}, self.name)
        variant = _named("variant", cfg.get("variant"), {v.name: v for v in self.variants}, self.name)
        return Execution(workload, variant)

    def definition(self) -> dict[str, Any]:
        """The canonical form: what a dataset records, and reads back with :meth:`of` (one object per
        suite, shared: read it, never change it)."""
        return _definition(self)

    def _canonical(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "publishes": list(self.publishes),
            "check": self.check,
            "workloads": [asdict(w) for w in self.workloads],
            "variants": ALL if self.every_variant else [asdict(v) for v in self.variants],
            "assumptions": [
                {"what": a.what, "choice": a.choice, "workloads": list(a.workloads)} for a in self.assumptions
            ],
        }

    @property
    def digest(self) -> str:
        """Eight hex digits of the definition: two suites of one name that differ differ here."""
        text = json.dumps(self.definition(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    @property
    def label(self) -> str:
        """``seed-003@1a2b3c4d``: how a setting shows the suite (its name alone hides an edit)."""
        return f"{self.name}@{self.digest}"


def load(name: str) -> Suite:
    """A suite of the project's ``conf/suite/``."""
    path = CONFIG_DIR / "suite" / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in path.parent.glob("*.yaml")))
        raise ValueError(f"no suite {name!r} in conf/suite; allowed: {known}")
    return Suite.of(yaml.safe_load(path.read_text()))


@cache
def report() -> Suite:
    """The report's suite (``conf/suite/report.yaml``): 22 shapes x the registry's variants."""
    return load("report")


def is_suite(value: object) -> bool:
    """Whether ``value`` is a suite's node or definition (a mapping with a name and workloads)."""
    return isinstance(value, Mapping) and "workloads" in value and "name" in value


@lru_cache(maxsize=32)
def _executions(suite: Suite) -> tuple[Execution, ...]:
    return tuple(Execution(w, v) for w, v in itertools.product(suite.workloads, suite.variants))


@lru_cache(maxsize=32)
def _definition(suite: Suite) -> dict[str, Any]:
    return suite._canonical()


@lru_cache(maxsize=32)
def _by_id(suite: Suite) -> dict[str, Execution]:
    return {e.execution_id: e for e in suite.executions}


@lru_cache(maxsize=32)
def _parsed(text: str) -> Suite:
    node = json.loads(text)
    if not isinstance(node, dict):
        raise ValueError(f"a suite is a mapping of {', '.join(KEYS)}; got {_short(node)}")
    name = node.get("name")
    if not isinstance(name, str) or not _WORD.fullmatch(name):
        raise ValueError(f"suite: name {_short(name)} must be a plain word (a-z, 0-9, -)")
    where = f"suite {name}"
    unknown = [k for k in node if k not in KEYS]
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; allowed: {', '.join(KEYS)}")
    publishes = node.get("publishes", [])
    publishes = [publishes] if isinstance(publishes, str) else publishes
    if not isinstance(publishes, list) or any(p not in PUBLISHES for p in publishes):
        raise ValueError(f"{where}: publishes {_short(publishes)}; allowed: a list of {', '.join(PUBLISHES)}")
    check = node.get("check", CHECKS[0])
    if check not in CHECKS:
        raise ValueError(f"{where}: check {_short(check)}; allowed: {', '.join(CHECKS)}")
    shape = node.get("shape", {})
    if not isinstance(shape, dict):
        raise ValueError(f"{where}: shape must be a mapping of {', '.join(WORKLOAD_FIELDS)}")
    _known_fields(f"{where}: shape", shape, WORKLOAD_FIELDS)
    workloads = _workloads(where, shape, node.get("workloads"))
    variants = _variants(where, node.get("variants"))
    assumptions = _assumptions(where, node.get("assumptions", []), workloads)
    every = node.get("variants") == ALL
    return Suite(name, tuple(dict.fromkeys(publishes)), check, workloads, variants, assumptions, every)


def _workloads(where: str, shape: dict[str, Any], entries: object) -> tuple[Workload, ...]:
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{where}: workloads must be a list of at least one entry of {', '.join(REQUIRED)}")
    out: dict[str, Workload] = {}
    for i, entry in enumerate(entries):
        at = f"{where}: workloads[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{at} must be a mapping of {', '.join(WORKLOAD_FIELDS)}, got {_short(entry)}")
        _known_fields(at, entry, WORKLOAD_FIELDS)
        fields = {**shape, **entry}
        missing = [f for f in REQUIRED if f not in fields]
        if missing:
            raise ValueError(
                f"{at} lacks {missing[0]} (neither it nor the suite's shape sets it); "
                f"required: {', '.join(REQUIRED)}"
            )
        keys = list(fields)
        lists = [v if isinstance(v, list) else [v] for v in fields.values()]
        for values in itertools.product(*lists):
            workload = _workload(at, dict(zip(keys, values, strict=True)))
            if workload.name in out:
                raise ValueError(f"{at}: workload {workload.name} is listed twice; each workload once")
            out[workload.name] = workload
    return tuple(out.values())


def _workload(at: str, fields: dict[str, Any]) -> Workload:
    """One workload of plain values, every field checked against its type, limit and the others."""
    kind = fields["kind"]
    if kind not in KINDS:
        raise ValueError(f"{at}.kind {_short(kind)}; allowed: {', '.join(KINDS)}")
    counts = {k: _count(at, k, fields[k], low=0 if k == "num_shared" else 1) for k in (*REQUIRED[1:],)}
    ep, experts, top_k = counts["ep"], counts["num_experts"], counts["top_k"]
    if experts % ep:
        divisors = [str(d) for d in range(1, experts + 1) if experts % d == 0]
        raise ValueError(
            f"{at}.ep {ep} does not divide num_experts {experts}; allowed: {', '.join(divisors[:12])}"
            + (" ..." if len(divisors) > 12 else "")
        )
    if top_k > experts:
        raise ValueError(f"{at}.top_k {top_k} exceeds num_experts {experts}; allowed: 1..{experts}")
    for key in ("d_model", "d_ff"):
        if counts[key] % MX_BLOCK:
            raise ValueError(
                f"{at}.{key} {counts[key]} must be a multiple of {MX_BLOCK} (MXFP8 blocks; the scales "
                "shrink it in blocks)"
            )
    profile = fields.get("profile", "none")
    imbalance = fields.get("imbalance", 1.0)
    if kind == "packing":
        if profile not in PROFILES:
            raise ValueError(f"{at}.profile {_short(profile)}; allowed for packing: {', '.join(PROFILES)}")
        if imbalance != 1.0:
            raise ValueError(f"{at}.imbalance {_short(imbalance)}: packing takes a profile; allowed: 1.0")
    else:
        if profile != "none":
            raise ValueError(f"{at}.profile {_short(profile)}: only packing takes one; allowed: none")
        if isinstance(imbalance, bool) or not isinstance(imbalance, int | float) or not 0 < imbalance <= ep:
            raise ValueError(f"{at}.imbalance {_short(imbalance)}; allowed: a number in (0, {ep}] (the EP)")
    return Workload(kind=kind, profile=profile, imbalance=float(imbalance), **counts)


def _count(at: str, key: str, value: object, *, low: int) -> int:
    limit, why = LIMITS[key]
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= limit:
        raise ValueError(f"{at}.{key} {_short(value)}; allowed: an integer in {low}..{limit:,} ({why})")
    return value


def _variants(where: str, entries: object) -> tuple[Variant, ...]:
    everything = [Variant(i.name, p, pl) for i in implementations() for p, pl in i.variants]
    if entries == ALL:
        return tuple(everything)
    if not isinstance(entries, list) or not entries:
        raise ValueError(
            f"{where}: variants must be {ALL!r} or a list of at least one variant name or mapping of "
            f"{', '.join(VARIANT_FIELDS)}"
        )
    by_name = {v.name: v for v in everything}
    out: dict[str, Variant] = {}
    for i, entry in enumerate(entries):
        at = f"{where}: variants[{i}]"
        if isinstance(entry, str):
            if entry not in by_name:
                raise ValueError(f"{at} {entry!r}; allowed: {', '.join(by_name)}")
            chosen = [by_name[entry]]
        elif isinstance(entry, dict):
            _known_fields(at, entry, VARIANT_FIELDS)
            chosen = _matching(at, entry, everything)
        else:
            raise ValueError(f"{at} must be a variant name or a mapping, got {_short(entry)}")
        for variant in chosen:
            if variant.name in out:
                raise ValueError(f"{at}: variant {variant.name} is listed twice; each variant once")
            out[variant.name] = variant
    return tuple(out.values())


def _matching(at: str, entry: dict[str, Any], everything: list[Variant]) -> list[Variant]:
    """The variants an entry of implementation, precision and pipeline names (all where one is left out)."""
    if "implementation" not in entry:
        raise ValueError(
            f"{at} lacks implementation; required: implementation (precision, pipeline optional)"
        )
    try:
        record = implementation(str(entry["implementation"]))
    except ValueError as err:
        raise ValueError(f"{at}.{err}") from None
    precision = entry.get("precision")
    if precision is not None and precision not in record.precisions:
        allowed = ", ".join(record.precisions) or "none"
        raise ValueError(f"{at}.precision {_short(precision)} of {record.name}; allowed: {allowed}")
    mine = [v for v in everything if v.implementation == record.name and precision in (None, v.precision)]
    pipeline = entry.get("pipeline")
    if pipeline is not None:
        pipelines = sorted({v.pipeline for v in mine})
        if pipeline not in pipelines:
            raise ValueError(
                f"{at}.pipeline {_short(pipeline)} of {record.name}; allowed: {', '.join(pipelines)}"
            )
        mine = [v for v in mine if v.pipeline == pipeline]
    return mine


def _assumptions(where: str, entries: object, workloads: tuple[Workload, ...]) -> tuple[SuiteAssumption, ...]:
    if not isinstance(entries, list):
        raise ValueError(f"{where}: assumptions must be a list of mappings of {', '.join(ASSUMPTION_FIELDS)}")
    names = [w.name for w in workloads]
    out = []
    for i, entry in enumerate(entries):
        at = f"{where}: assumptions[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{at} must be a mapping of {', '.join(ASSUMPTION_FIELDS)}, got {_short(entry)}")
        _known_fields(at, entry, ASSUMPTION_FIELDS)
        for key in ("what", "choice"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise ValueError(f"{at}.{key} must be text; required: {', '.join(ASSUMPTION_FIELDS[:2])}")
        patterns = entry.get("workloads", "*")
        patterns = [patterns] if isinstance(patterns, str) else patterns
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise ValueError(f"{at}.workloads must be a glob over workload names or a list of them")
        touched = tuple(n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns))
        if not touched:
            raise ValueError(
                f"{at}.workloads {_short(patterns)} names no workload; allowed: {', '.join(names)}"
            )
        out.append(SuiteAssumption(entry["what"], entry["choice"], touched))
    return tuple(out)


def _known_fields(at: str, entry: dict[str, Any], allowed: tuple[str, ...]) -> None:
    unknown = [k for k in entry if k not in allowed]
    if unknown:
        raise ValueError(f"{at}: unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}")


def _named(key: str, name: object, items: Mapping[str, Any], suite: str) -> Any:
    if not isinstance(name, str) or name not in items:
        raise ValueError(f"{key} {_short(name)} is not in suite {suite}; allowed {key}: {', '.join(items)}")
    return items[name]


def _plain(node: object) -> Any:
    """A config node (an OmegaConf one included) as plain JSON values."""
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, Sequence) and not isinstance(node, str):
        return [_plain(v) for v in node]
    return node


def _short(value: object) -> str:
    """``value`` for a one-line message: quoted, cut where long (:func:`pipeline.base.folders.shown`)."""
    return shown(value) if isinstance(value, str) else cut(repr(value))
