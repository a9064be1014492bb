"""Molecular dynamics on top of the pipeline: the reaction-field calculator and its frame engine."""
