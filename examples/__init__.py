"""Worked examples that use flower_topics from outside the package (docs/adding-a-method.md)."""
