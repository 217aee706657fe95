"""Experiment runners: federated vs centralized vs single-party training."""

from flower_topics.simulations.runner import MODES, TABLE_COLUMNS, simulate, write_results_table

__all__ = ["MODES", "TABLE_COLUMNS", "simulate", "write_results_table"]
