"""Experiment runners: federated vs centralized vs single-party training."""

from flower_topics.simulations.runner import ENGINES, MODES, TABLE_COLUMNS, simulate, write_results_table

__all__ = ["ENGINES", "MODES", "TABLE_COLUMNS", "simulate", "write_results_table"]
