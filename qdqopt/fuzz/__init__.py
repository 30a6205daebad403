"""Differential fuzzing of qdqopt against live ORT (``qdqopt fuzz``).

* :mod:`qdqopt.fuzz.strategies`: the QDQ graph builder and its Hypothesis strategy (:func:`graphs`), and the seeded
  run of it (:func:`generate`);
* :mod:`qdqopt.fuzz.worker`: the child process that runs ORT and qdqopt on a model (ORT's C++ can abort);
* :mod:`qdqopt.fuzz.runner`: the worker's parent side, shards, outcomes, findings and their classes;
* :mod:`qdqopt.fuzz.session`: the run (:func:`fuzz`): generation, jobs, shrinking and saving;
* :mod:`qdqopt.fuzz.shrink`: delta debugging on nodes down to a minimal model that still shows a finding;
* :mod:`qdqopt.fuzz.report`: the saved findings and the summary table.

Hypothesis is a dev dependency: importing this package does not need it, generating graphs does.
"""

from __future__ import annotations

from qdqopt.fuzz.runner import CONFIGS, LEVELS, Finding, FuzzRun, shard_cases
from qdqopt.fuzz.session import fuzz

__all__ = ["CONFIGS", "LEVELS", "Finding", "FuzzRun", "fuzz", "shard_cases"]
