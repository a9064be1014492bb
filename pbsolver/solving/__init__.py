"""The solve layer: the iteration loop, the linear system it runs on, the Solver and batches."""
