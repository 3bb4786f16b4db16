"""The import graph of the packages: no cycle, and no folder importing a folder above it.

A module's stage is its folder's (the longest entry of ``STAGES`` its name starts with); a module may
import its own stage and those below. Bottom to top:
  0 cutlass_kernels (its command line included: the device run's children import no pipeline stage)
  1 pipeline/base: what every stage shares (vocabulary, implementations, exits, bounds, folders, GPU
    presets, the saved-state record, the report's reductions); pipeline/__init__ (REPO_ROOT)
  2 pipeline/matrix, pipeline/cost (the layer's bytes and time at the presets' peaks)
  3 pipeline/moe, pipeline/data (the kept estimate table's format too)
  4 pipeline/bench
  5 pipeline/launch, pipeline/report
  6 pipeline/compose (the Hydra adapter), pipeline/survey (each execution's state in a dataset)
  7 pipeline/tools: the wing of side tools (compare, history, estimate, model); any core stage below
  8 pipeline/commands, the ``python -m pipeline.<command>`` modules at the top of pipeline/, and every
    ``__main__`` module but the kernels'
Besides, only the Hydra adapter, the tools and the commands import Hydra (or OmegaConf), the stages
that define the matrix and the data contracts import no launcher, and publishing (the aggregate
command, the report, compare) reaches no module of the estimate. The benchmarks (``benchmarks/``)
import the project's packages, never the tests.

Run by hand: ``python -m pytest -q tests/test_layering.py`` (it reads the sources; nothing is imported).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cutlass_kernels", "pipeline")
STAGES = {
    "cutlass_kernels": 0,
    "pipeline": 1,
    "pipeline.base": 1,
    "pipeline.matrix": 2,
    "pipeline.cost": 2,
    "pipeline.moe": 3,
    "pipeline.data": 3,
    "pipeline.bench": 4,
    "pipeline.launch": 5,
    "pipeline.report": 5,
    "pipeline.compose": 6,
    "pipeline.survey": 6,
    "pipeline.tools": 7,
    "pipeline.commands": 8,
}
ENTRY = 8
HYDRA = ("hydra", "omegaconf")
NO_LAUNCHER = ("pipeline.base", "pipeline.matrix", "pipeline.data", "pipeline.moe", "pipeline.bench")


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


MODULES = modules()


def imports(path: Path) -> set[str]:
    """Every module an import statement of ``path`` names, at any depth of the file but for
    ``if TYPE_CHECKING:`` blocks (annotations only); ``from a import b`` names ``a.b`` where that is a
    module of the project, else ``a``."""
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if submodule in MODULES else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return names


def project_imports(path: Path) -> set[str]:
    """The project modules ``path`` imports."""
    out = set()
    for name in imports(path):
        while name and name not in MODULES:
            name = name.rpartition(".")[0]
        if name:
            out.add(name)
    return out


GRAPH = {name: project_imports(path) - {name} for name, path in MODULES.items()}


def stage(module: str) -> int:
    if module.endswith(".__main__") and not module.startswith("cutlass_kernels."):
        return ENTRY
    path = MODULES.get(module)
    if path is not None and path.parent == ROOT / "pipeline" and path.name != "__init__.py":
        return ENTRY  # python -m pipeline.<command>
    name = module
    while name not in STAGES:
        name = name.rpartition(".")[0]
    return STAGES[name]


def test_every_module_has_a_stage():
    assert all(stage(m) >= 0 for m in MODULES)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_imports_a_stage_above_its_own(module):
    above = sorted(m for m in GRAPH[module] if stage(m) > stage(module))
    assert not above, f"{module} (stage {stage(module)}) imports {above}"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    assert find_cycle(GRAPH) is None


def test_a_planted_cycle_is_found():
    graph = {k: set(v) for k, v in GRAPH.items()}
    assert "pipeline.data.dataset" in graph["pipeline.data.ledger"]
    graph["pipeline.data.dataset"].add("pipeline.data.ledger")
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1] == "pipeline.data.dataset"
    assert "pipeline.data.ledger" in cycle
    assert all(b in graph[a] for a, b in zip(cycle, cycle[1:], strict=False))  # every step an import


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_hydra_adapter_and_entry_points_import_hydra(module):
    uses = sorted(n for n in imports(MODULES[module]) if n.split(".")[0] in HYDRA)
    tool_command = module.startswith("pipeline.tools.") and module.endswith(".cli")
    if stage(module) < ENTRY and not module.startswith("pipeline.compose") and not tool_command:
        assert not uses, f"{module} imports {uses}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(NO_LAUNCHER)))
def test_matrix_data_layers_and_bench_import_no_launcher(module):
    uses = sorted(n for n in imports(MODULES[module]) if n.split(".")[0] == "submitit" or "launch" in n)
    allowed = ("submitit",) if module.startswith("pipeline.bench") else ()  # a job reads its environment
    assert [n for n in uses if n not in allowed] == [], f"{module} imports {uses}"


def reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


@pytest.mark.parametrize(
    "module", ["pipeline.commands.aggregate", "pipeline.report", "pipeline.tools.compare"]
)
def test_publishing_never_reaches_the_estimate(module):
    """Publishing reads the kept estimate table (pipeline.data.estimates) and imports nothing of the
    estimate: no torch, no fake CUDA, no C++ build; ``aggregate --estimate`` runs the estimate's own
    command in a process of its own."""
    estimate = sorted(m for m in reached(GRAPH, module) if m.startswith("pipeline.tools.estimate"))
    assert not estimate, f"{module} reaches {estimate}"


def test_a_planted_import_of_the_estimate_is_reached():
    graph = {k: set(v) for k, v in GRAPH.items()}
    graph["pipeline.report.publish"].add("pipeline.tools.estimate.table")
    assert "pipeline.tools.estimate.table" in reached(graph, "pipeline.commands.aggregate")


# ----------------------------------------------------------------------------------------------- jobs/
# The scripts around the packages (the device run, its records' tables, the checkers) sit above every
# stage: they may import the pipeline and the kernels, never the tests, and no package imports them.
# The device run's modules import downward among themselves, in this order (bottom first), and its
# runner process reaches neither torch nor Hydra: it starts before the packed wheels are unpacked.
JOBS = {
    ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
    for p in sorted((ROOT / "jobs").rglob("*.py"))
}
DEVICE_RUN = (
    "plan",
    "pack",
    "pytest_records",
    "summary",
    "run",
    "environment",
    "kernels",
    "layers",
    "main",
    "__main__",
)
RUNNER_LACKS = ("torch", "hydra", "omegaconf", "submitit")


@pytest.mark.parametrize("module", sorted(JOBS))
def test_jobs_never_import_the_tests(module):
    uses = sorted(n for n in imports(JOBS[module]) if n.split(".")[0] == "tests")
    assert not uses, f"{module} imports {uses}"


def test_no_package_imports_jobs():
    assert not [(m, n) for m, p in MODULES.items() for n in imports(p) if n.split(".")[0] == "jobs"]


@pytest.mark.parametrize("module", sorted(m for m in JOBS if m.startswith("jobs.gpu_run.")))
def test_the_device_run_imports_downward(module):
    own = DEVICE_RUN.index(module.removeprefix("jobs.gpu_run."))  # a new module takes its place here
    above = sorted(
        n
        for n in imports(JOBS[module])
        if n.startswith("jobs.gpu_run") and n != module
        if n == "jobs.gpu_run" or DEVICE_RUN.index(n.removeprefix("jobs.gpu_run.")) >= own
    )
    assert not above, f"{module} imports {above}"


def test_the_device_runner_reaches_neither_torch_nor_hydra():
    graph = {**GRAPH, **{m: {n for n in imports(p) if n in MODULES or n in JOBS} for m, p in JOBS.items()}}
    reach = {"jobs.gpu_run.main", *reached(graph, "jobs.gpu_run.main")}
    paths = {**MODULES, **JOBS}
    uses = sorted((m, n) for m in reach for n in imports(paths[m]) if n.split(".")[0] in RUNNER_LACKS)
    assert not uses, uses


# ---- benchmarks/: what they measure is the project's code, so they import it and nothing of tests/ ----

BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))
# the folders of the checkout a benchmark could import by name; of these only the packages are allowed
CHECKOUT = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")}


def outside_the_packages(path: Path) -> list[str]:
    """The modules of the checkout's folders other than the packages that ``path`` imports."""
    names = (n for n in imports(path) if n.split(".")[0] in CHECKOUT)
    return sorted(n for n in names if n.split(".")[0] not in PACKAGES)


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_benchmarks_import_the_packages_never_the_tests(path: Path):
    outside = outside_the_packages(path)
    assert not outside, f"benchmarks/{path.name} imports {outside}"


def test_a_planted_import_of_the_tests_is_found(tmp_path: Path):
    bench = tmp_path / "bench.py"
    imported = ["import sys", "from pipeline.matrix import EXECUTIONS", "from tests.moe_cases import CASES"]
    bench.write_text("\n".join(imported))
    assert BENCHMARKS and {"tests", "jobs"} <= CHECKOUT
    assert outside_the_packages(bench) == ["tests.moe_cases"]
