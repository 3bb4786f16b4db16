"""Status of a launched dataset: which executions are done, running, pending, failed or missing."""

from pipeline.survey.states import DONE, MISSING, STATES, ExecutionStatus, dataset_status, dataset_survey

__all__ = ["DONE", "MISSING", "STATES", "ExecutionStatus", "dataset_status", "dataset_survey"]
