"""The Hydra adapter, in one place: the suites as a config group and a sweep's names expanded over
the chosen one, the resolvers, the fast composition of a sweep's jobs and the selection a multirun
would launch. Stages below it see plain values only: a job as :class:`pipeline.launch.plan.Composed`."""

from pipeline import CONFIG_DIR
from pipeline.compose.jobs import compose_jobs, composed
from pipeline.compose.select import select
from pipeline.compose.store import CONFIG_NAME, register

__all__ = ["CONFIG_DIR", "CONFIG_NAME", "compose_jobs", "composed", "register", "select"]
