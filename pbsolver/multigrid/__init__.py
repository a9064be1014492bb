"""Geometric multigrid: coarsening, coarse operators, the hierarchy and its cycle, methods."""
