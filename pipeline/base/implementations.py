"""The implementations of the layer, one record each: everything decided per implementation.

Every stage that names an implementation reads its :class:`Implementation` here: the matrix its
variants and their names, the layer its MX scale mode, SwiGLU backward and saved-state policy, the
report its place in the pairs, its label and its colours. So another implementation is one record,
registered by its own module, and nothing else changes.

The matrix is built from the registry when it is imported, and every process of a sweep (the sweep,
each job, each rank) builds it, so an implementation must be registered before anything reads the
registry: by a module named in ``MOE_BENCH_IMPLEMENTATIONS`` (comma-separated, imported at the first
read in every process that inherits the environment), or by calling :func:`register` before the
first read. Once read, the registry is closed: a later registration is refused rather than leaving a
matrix that does not list it.

The report compares two implementations (``pairs_as``): its ``reference`` (MoK) and its
``candidate`` (Dist-MoE, whose fastest pipeline per matched workload is selected); any other is
published beside them, in no pair.
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass

from cutlass_kernels.formats import SCALE_MODES
from pipeline.base.vocabulary import PRECISIONS

__all__ = [
    "DIST_MOE",
    "MOK",
    "PAIR_ROLES",
    "PLUGINS_ENV",
    "SWIGLU_BACKWARDS",
    "Choice",
    "Implementation",
    "candidate",
    "implementation",
    "implementations",
    "pipelines_of",
    "reference",
    "register",
]

PLUGINS_ENV = "MOE_BENCH_IMPLEMENTATIONS"
SWIGLU_BACKWARDS = ("unfused", "fused")  # fused: in the form of the device (pipeline/moe/swiglu.py)
PAIR_ROLES = ("reference", "candidate")  # speedup = reference time / candidate time
VARIANT_NAMES = ("precision", "pipeline")  # what follows the implementation in a variant's name
_WORD = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")  # a name that is also a plain path component
_COLOUR = re.compile(r"#[0-9a-fA-F]{6}|[a-z]+")  # hex or a named colour
_FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # module:attribute


@dataclass(frozen=True)
class Choice:
    """A choice about an implementation's pipelines that the report does not state: published among
    the matrix's assumptions, touching the implementation's executions of ``precision``."""

    what: str
    choice: str
    precision: str


@dataclass(frozen=True)
class Implementation:
    """One implementation of the layer.

    ``variants`` are its (precision, pipeline) pairs in matrix order; ``variant_names`` says whether a
    variant is named by its precision (one pipeline per precision) or by its pipeline. ``policy`` is
    the ``module:attribute`` of its saved-state policy, called as ``policy(cfg, layers)``: a path, not
    an object, so that this record stays below the layers that it configures.
    """

    name: str  # in variant names, execution ids and shards
    label: str  # what people read: legends, titles, messages
    colour: str  # its bars in the figures
    note_colour: str  # its text and per-layer budget marks in the figures
    variants: tuple[tuple[str, str], ...]
    mx_scale_mode: str  # E8M0 scale selection of its MXFP8 operands (cutlass_kernels/mxfp8.py)
    swiglu_backward: str
    policy: str
    variant_names: str = "precision"
    pairs_as: str | None = None
    choices: tuple[Choice, ...] = ()

    def __post_init__(self) -> None:
        if not _WORD.fullmatch(self.name):
            raise ValueError(f"implementation name {self.name!r} must be lowercase words joined by '-'")
        if not self.label.strip() or not self.label.isprintable():
            raise ValueError(f"implementation {self.name}: label {self.label!r} must be printable text")
        for what in ("colour", "note_colour"):
            if not _COLOUR.fullmatch(getattr(self, what)):
                raise ValueError(
                    f"implementation {self.name}: {what} {getattr(self, what)!r} is not a colour"
                )
        _check(self.name, "mx_scale_mode", self.mx_scale_mode, SCALE_MODES)
        _check(self.name, "swiglu_backward", self.swiglu_backward, SWIGLU_BACKWARDS)
        _check(self.name, "variant_names", self.variant_names, VARIANT_NAMES)
        if self.pairs_as is not None:
            _check(self.name, "pairs_as", self.pairs_as, PAIR_ROLES)
        if not _FACTORY.fullmatch(self.policy):
            raise ValueError(f"implementation {self.name}: policy {self.policy!r} is not module:attribute")
        if not self.variants or len(set(self.variants)) != len(self.variants):
            raise ValueError(f"implementation {self.name}: variants must be distinct and at least one")
        for precision, pipeline in self.variants:
            _check(self.name, "precision", precision, PRECISIONS)
            if not _WORD.fullmatch(pipeline):
                raise ValueError(f"implementation {self.name}: pipeline {pipeline!r} is not a plain word")
        names = [self.variant_name(p, pl) for p, pl in self.variants]
        if len(set(names)) != len(names):
            raise ValueError(
                f"implementation {self.name}: variants named by {self.variant_names} repeat a name "
                f"({', '.join(names)}): one pipeline per precision, or variants named by pipeline"
            )
        for choice in self.choices:
            _check(self.name, "choice precision", choice.precision, self.precisions)

    @property
    def precisions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for p, _ in self.variants))

    def pipelines(self, precision: str) -> tuple[str, ...]:
        """Its pipelines at ``precision`` (none where it does not run at that precision)."""
        return tuple(pipeline for p, pipeline in self.variants if p == precision)

    def variant_name(self, precision: str, pipeline: str) -> str:
        """The name of one of its variants, e.g. ``mok-bf16`` or ``dist-moe-fp8-dispatch``."""
        return f"{self.name}-{precision if self.variant_names == 'precision' else pipeline}"

    @property
    def several_pipelines(self) -> bool:
        """Whether it has more than one pipeline at some precision (so a figure shows the fastest)."""
        return any(len(self.pipelines(p)) > 1 for p in self.precisions)


def _check(name: str, what: str, value: object, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(
            f"implementation {name}: {what} {value!r} is not allowed; allowed: {', '.join(allowed)}"
        )


MOK = Implementation(
    name="mok",
    label="MoK",
    colour="#7f7f7f",
    note_colour="black",
    variants=(("bf16", "native"), ("mxfp8", "native")),
    mx_scale_mode="exact",
    swiglu_backward="unfused",
    policy="pipeline.moe.policy:MoKBudget",
    variant_names="precision",
    pairs_as="reference",
)
DIST_MOE = Implementation(
    name="dist-moe",
    label="Dist-MoE",
    colour="#1f77b4",
    note_colour="#0b3d66",
    variants=(("bf16", "bf16"), ("mxfp8", "fp8-dispatch"), ("mxfp8", "bf16-dispatch")),
    mx_scale_mode="fast",
    swiglu_backward="fused",
    policy="pipeline.moe.policy:SharedSlot",
    variant_names="pipeline",
    pairs_as="candidate",
    choices=(
        Choice(
            "Dist-MoE MXFP8 pipelines",
            "the report's MXFP8 Dist-MoE pipelines are fp8-dispatch (E4M3 rows and E8M0 scales on the "
            "wire) and bf16-dispatch (rows in the layer dtype on the wire, quantized where the experts are)",
            "mxfp8",
        ),
    ),
)

_registered: dict[str, Implementation] = {}
_state = "open"  # open -> loading (the modules of PLUGINS_ENV register) -> closed (read)


def register(record: Implementation) -> Implementation:
    """Add ``record`` to the registry; a ValueError says what it shares with a registered one, a
    RuntimeError that the registry was already read."""
    _conflicts(record, tuple(_registered.values()))
    if _state == "closed":
        raise RuntimeError(
            f"implementation {record.name!r} registered after the implementations were read (the matrix "
            f"is built from them): register it from a module named in {PLUGINS_ENV}"
        )
    _registered[record.name] = record
    return record


def _conflicts(record: Implementation, registered: tuple[Implementation, ...]) -> None:
    """Names, labels, variant names and execution-id endings are unique; one record per pair role."""
    mine = _claims(record)
    for other in registered:
        for what, values in _claims(other).items():
            if shared := sorted(values & mine[what]):
                raise ValueError(
                    f"implementation {record.name!r} has the {what} {', '.join(shared)} of {other.name!r}"
                )


def _claims(record: Implementation) -> dict[str, set[str]]:
    """What a record holds that no other may hold too."""
    return {
        "name": {record.name},
        "label": {record.label},
        "variant name": {record.variant_name(p, pl) for p, pl in record.variants},
        "execution id ending": {f"{record.name}-{pl}" for _, pl in record.variants},
        "pair role": {record.pairs_as} if record.pairs_as else set(),
    }


def implementations() -> tuple[Implementation, ...]:
    """Every registered implementation, in registration order (the matrix's order); the first read
    imports the modules of ``MOE_BENCH_IMPLEMENTATIONS`` and closes the registry."""
    global _state
    if _state == "open":
        _state = "loading"
        try:
            for module in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
                try:
                    importlib.import_module(module)
                except ImportError as err:
                    raise ImportError(
                        f"{PLUGINS_ENV} names {module!r}, which cannot be imported: {err}"
                    ) from err
        finally:
            _state = "closed"
    return tuple(_registered.values())


def implementation(name: str) -> Implementation:
    """The record of ``name``; a ValueError names the registered ones."""
    implementations()
    if name not in _registered:
        raise ValueError(f"implementation {name!r} is not allowed; allowed: {', '.join(_registered)}")
    return _registered[name]


def _paired(role: str) -> Implementation:
    found = [i for i in implementations() if i.pairs_as == role]
    if len(found) != 1:
        raise RuntimeError(f"no implementation is registered as the pairs' {role}")
    return found[0]


def reference() -> Implementation:
    """The implementation the pairs measure against (MoK): speedup = its time / the candidate's."""
    return _paired("reference")


def candidate() -> Implementation:
    """The implementation the pairs measure (Dist-MoE), its fastest pipeline per workload selected."""
    return _paired("candidate")


def pipelines_of(name: str, precision: str) -> tuple[str, ...]:
    """The pipelines of one implementation at one precision; a ValueError names what is allowed."""
    record = implementation(name)
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not allowed; allowed: {', '.join(PRECISIONS)}")
    return record.pipelines(precision)


register(MOK)
register(DIST_MOE)
