"""Nelder-Mead minimisation from one start or several in lockstep (the acceptance fits' optimiser): small models
with a handful of parameters, where an evaluation's cost is numpy's per-call overhead, so B starts evaluated as one
stack cost about what one start does."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def nelder_mead(f: Callable[[np.ndarray], float], x0: np.ndarray, step: float = 0.5, iters: int = 400,
                tol: float = 1e-12, rtol: float = 1e-5) -> tuple[np.ndarray, float]:
    """Minimise f from x0 (Nelder and Mead 1965; `nelder_mead_many` with one start)."""
    return nelder_mead_many(lambda xs: np.array([f(x) for x in xs]), np.asarray(x0, dtype=float)[None], step, iters,
                            tol, rtol)[0]


def nelder_mead_many(f: Callable[..., np.ndarray], x0: np.ndarray, step: float = 0.5, iters: int = 400,
                     tol: float = 1e-12, rtol: float = 1e-5, by_start: bool = False) -> list[tuple[np.ndarray, float]]:
    """Minimise from each row of x0 (B, n) (Nelder and Mead 1965, the usual coefficients 1, 2, 0.5, 0.5), each start
    until its simplex's values agree within `rtol` of its best (or `tol`). The starts run in lockstep and `f` takes
    a stack of points (m, n) -> (m,): an iteration is one batched evaluation of every start's reflected point and one
    of the expanded or contracted points of the starts that need one, so B starts of a small model cost about what
    one does. Each start takes the path it would take alone (its branches decided by its own values). A hidden
    chain's fit on the 48-request sample ends at the same loss to 4 digits with 2.6x fewer evaluations at
    rtol = 1e-5 than running to 1e-12.

    With `by_start`, `f(points, start)` also gets the start (row of x0) each point belongs to, so starts may
    minimise different functions - several fits of one model, each from its own starts, in one lockstep run."""
    x0 = np.asarray(x0, dtype=float)
    B, n = x0.shape
    pts = x0[:, None, :] + np.vstack([np.zeros((1, n)), step * np.eye(n)])[None]  # (B, n + 1, n)
    def ev(points: np.ndarray, start: np.ndarray) -> np.ndarray:
        return f(points, start) if by_start else f(points)

    vals = ev(pts.reshape(-1, n), np.repeat(np.arange(B), n + 1)).reshape(B, n + 1)
    active = np.ones(B, dtype=bool)
    starts = np.arange(B)[:, None]
    for _ in range(iters):
        order = np.argsort(vals, axis=1)
        pts, vals = pts[starts, order], vals[starts, order]
        active &= np.abs(vals[:, -1] - vals[:, 0]) >= np.maximum(tol, rtol * np.abs(vals[:, 0]))
        a = np.flatnonzero(active)
        if not len(a):
            break
        P, V = pts[a], vals[a]
        centroid, worst = P[:, :-1].mean(axis=1), P[:, -1]
        reflected = centroid + (centroid - worst)
        fr = ev(reflected, a)
        expand = fr < V[:, 0]
        contract = ~expand & (fr >= V[:, -2])
        second = np.where(expand[:, None], centroid + 2 * (centroid - worst), centroid + 0.5 * (worst - centroid))
        f2 = np.full(len(a), np.inf)
        if (expand | contract).any():
            f2[expand | contract] = ev(second[expand | contract], a[expand | contract])
        take_second = (expand & (f2 < fr)) | (contract & (f2 < V[:, -1]))
        shrink = contract & ~take_second
        new_pt = np.where(take_second[:, None], second, reflected)
        new_val = np.where(take_second, f2, fr)
        keep = ~shrink
        P[keep, -1], V[keep, -1] = new_pt[keep], new_val[keep]
        if shrink.any():
            s = np.flatnonzero(shrink)
            best = P[s, :1]
            P[s, 1:] = best + 0.5 * (P[s, 1:] - best)
            V[s, 1:] = ev(P[s, 1:].reshape(-1, n), np.repeat(a[s], n)).reshape(len(s), n)
        pts[a], vals[a] = P, V
    best = np.argmin(vals, axis=1)
    return [(pts[b, best[b]].copy(), float(vals[b, best[b]])) for b in range(B)]
