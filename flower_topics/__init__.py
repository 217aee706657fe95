"""Federated, privacy-preserving topic modeling on Flower."""

__version__ = "0.1.0"
