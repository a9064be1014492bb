"""The interval recorder of the forces' line ends, run as plain Python.

A line recorded in pieces (the GPU's SES recorder, :mod:`pbsolver.backends.cuda.line_ends`)
must give the whole line's intervals once joined, split only at the pieces' common nodes, where
each split end is cancelled by the next piece's start; an end clipped to the grid's last node
is outside the grid.
"""

from __future__ import annotations

import numpy as np
import pytest

from pbsolver.backends.bodies.line_ends import cancelled_body, edge_of_body, make_recorded_end
from pbsolver.backends.bodies.lines import join_pieces_body, record_range_body

recorded_end_body = make_recorded_end(edge_of_body)  # as the kernels compile it

# t0 + nbins·h minus t0, over h, rounds below nbins here: an end clipped to the last node must
# still count as outside the grid
T0, H, NBINS = -0.729, 0.55, 120


def _record(intervals, pieces):
    """Each piece's records of ``intervals`` (one line), joined: (rec, count)."""
    rec = np.zeros((1, pieces, len(intervals) + 1, 2))
    for p in range(pieces):
        k_lo, k_hi = p * NBINS // pieces, (p + 1) * NBINS // pieces
        for s, e in intervals:
            record_range_body(rec, 2, 0, 0, p, s, e, T0, H, k_lo, k_hi)
    out = np.zeros((1, 1, int(rec[0, :, 0, 0].sum()) + 1, 2))
    join_pieces_body(0, rec, pieces, out)
    return out, int(out[0, 0, 0, 0])


def _moving_ends(rec, n):
    """(t, side) of the ends inside the grid that no other interval's end cancels."""
    ends = []
    for q in range(2 * n):
        t, side, k = recorded_end_body(rec, 0, 0, q, T0, H, NBINS)
        if k >= 0 and not cancelled_body(rec, 0, 0, n, q, t):
            ends.append((t, side))
    return sorted(ends)


@pytest.mark.parametrize("pieces", [1, 2, 5, NBINS])
def test_pieces_give_the_whole_lines_moving_ends(pieces):
    rng = np.random.default_rng(pieces)
    tmax = T0 + NBINS * H
    # disjoint intervals, some across piece ends, one from before the grid, one past its end
    cuts = np.sort(rng.uniform(T0 + 0.05, tmax - 0.05, 10))
    intervals = [(T0 - 2.0, T0 + 0.3)] + [tuple(cuts[i : i + 2]) for i in range(0, 10, 2)]
    intervals.append((tmax - 0.2, tmax + 1.0))
    whole, n1 = _record(intervals, 1)
    joined, n = _record(intervals, pieces)
    assert n >= len(intervals)
    expected = _moving_ends(whole, n1)
    assert _moving_ends(joined, n) == expected
    # the two ends outside the grid (before t0, past the last node) never move anything
    assert (T0 + 0.3, 1) in expected and (tmax - 0.2, 0) in expected
    assert len(expected) == 2 + 2 * 5
    # covered length is kept: the joined pieces tile the whole line's intervals
    assert np.isclose(np.diff(joined[0, 0, 1 : n + 1], axis=1).sum(),
                      np.diff(whole[0, 0, 1 : n1 + 1], axis=1).sum())  # fmt: skip


def test_an_end_clipped_to_the_last_node_is_outside_the_grid():
    rec = np.zeros((1, 1, 2, 2))
    record_range_body(rec, 0, 0, 0, 0, T0 + 1.0, T0 + 100.0, T0, H, 0, NBINS)
    assert rec[0, 0, 1, 1] == T0 + NBINS * H  # clipped to the grid's last node, exactly
    assert recorded_end_body(rec, 0, 0, 1, T0, H, NBINS)[2] == -1
    assert np.floor((rec[0, 0, 1, 1] - T0) / H) < NBINS  # floor alone would call it inside
    assert recorded_end_body(rec, 0, 0, 0, T0, H, NBINS)[2] == int(1.0 // H)
