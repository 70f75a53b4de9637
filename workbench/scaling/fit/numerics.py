"""Numerical core of the sigmoid fit: a vectorised global grid search, a batched
Levenberg-Marquardt refinement, and the residual block bootstrap built on both.

Eq. 1 in log-compute x = ln C, with m = ln C_mid and d = A - R0:

    R = R0 + d * expit(B * (x - m))      since 1 / (1 + (C_mid/C)^B) = expit(B (ln C - ln C_mid))

For fixed (m, B) the model is linear in d, so the best d is closed-form (clipped to its bounds,
which is exact for a 1-D quadratic). The grid therefore runs over (C_mid, B) only and is exact in
A: it does at least as well as the paper's grid (A x C_mid, B fitted), and it is one broadcast
plus one matrix product, also across all bootstrap replicates at once (their design x is fixed).
Grid minima are then polished by a Levenberg-Marquardt loop run on all starts together (bounds by
an active set: a parameter on its bound is frozen while the descent direction points outward).
Bootstrap replicates use a coarser grid and start from the better of its optimum and the point
estimate, so 200 replicates cost about as much as a few single fits.

Parameters are carried as theta = (A, m, ln B). Nothing here validates input: `sigmoid.py` does.
`PointFit` and `noise_blocks` are what sigmoid.py's fit reads back: the point estimate and its noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

B_MIN, B_MAX = 0.05, 20.0  # exponent range searched; the paper's runs have B in 1..2.5
SPAN_DECADES = 2.0  # C_mid searched from 100x below the first fitted compute to 100x above the last


@dataclass(frozen=True)
class Bounds:
    a_lo: float
    a_hi: float
    m_lo: float
    m_hi: float
    lb_lo: float = float(np.log(B_MIN))
    lb_hi: float = float(np.log(B_MAX))

    @classmethod
    def for_data(cls, x: np.ndarray) -> "Bounds":
        """Bounds derived from the data, so any compute unit works (log space is scale-free)."""
        span = SPAN_DECADES * np.log(10.0)
        return cls(0.0, 1.0, float(x.min() - span), float(x.max() + span))

    def lo(self) -> np.ndarray:
        return np.array([self.a_lo, self.m_lo, self.lb_lo])

    def hi(self) -> np.ndarray:
        return np.array([self.a_hi, self.m_hi, self.lb_hi])


def predict(theta: np.ndarray, r0: float, x: np.ndarray) -> np.ndarray:
    """Model values; theta (..., 3), x broadcastable against theta[..., :1]."""
    a, m, lb = theta[..., 0:1], theta[..., 1:2], theta[..., 2:3]
    with np.errstate(invalid="ignore", over="ignore"):
        return r0 + (a - r0) * expit(np.exp(lb) * (x - m))


def grid_search(
    x: np.ndarray, Y: np.ndarray, r0: float, bounds: Bounds, n_m: int, n_b: int, fixed_a: float | None = None, n_starts: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Best grid points for each row of Y (K, n). Returns theta (K, n_starts, 3) and their SSE.

    With n_starts > 1 the extra starts are the best other local minima of the grid surface, so
    the refinement also explores competing basins.
    """
    m_grid = np.linspace(bounds.m_lo, bounds.m_hi, n_m)
    lb_grid = np.linspace(bounds.lb_lo, bounds.lb_hi, n_b)
    Yd = Y - r0  # (K, n)
    T = np.empty((n_b * n_m, Y.shape[0]))  # s . y' for every grid point and replicate
    SS = np.empty((n_b * n_m, 1))  # s . s
    rows = max(1, int(4e6 // (n_m * len(x))))  # chunk over B so memory stays ~32 MB for any n
    for i in range(0, n_b, rows):
        lbs = lb_grid[i : i + rows]
        S = expit(np.exp(lbs)[:, None, None] * (x[None, None, :] - m_grid[None, :, None])).reshape(len(lbs) * n_m, -1)
        T[i * n_m : (i + len(lbs)) * n_m] = S @ Yd.T
        SS[i * n_m : (i + len(lbs)) * n_m, 0] = np.einsum("gn,gn->g", S, S)
    SS = np.maximum(SS, 1e-300)
    yy = np.einsum("kn,kn->k", Yd, Yd)[None, :]
    if fixed_a is None:
        d = np.clip(T / SS, bounds.a_lo - r0, bounds.a_hi - r0)
    else:
        d = np.full_like(T, fixed_a - r0)
    sse = yy - 2 * d * T + d * d * SS  # (G, K)
    K = Y.shape[0]
    if n_starts == 1:
        idx = np.argmin(sse, axis=0)[:, None]  # (K, 1)
    else:
        idx = np.stack([_local_minima(sse[:, k].reshape(n_b, n_m), n_starts) for k in range(K)])
    ib, im = np.divmod(idx, n_m)
    kk = np.arange(K)[:, None]
    theta = np.stack([r0 + d[idx, kk], m_grid[im], lb_grid[ib]], axis=-1)
    return theta, sse[idx, kk]


def _local_minima(surface: np.ndarray, n: int) -> np.ndarray:
    """Flat indices of the n lowest local minima (8-neighbourhood) of a 2-D surface."""
    p = np.pad(surface, 1, constant_values=np.inf)
    core = p[1:-1, 1:-1]
    is_min = np.ones_like(core, dtype=bool)
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            if di or dj:
                is_min &= core <= p[1 + di : p.shape[0] - 1 + di, 1 + dj : p.shape[1] - 1 + dj]
    flat = np.flatnonzero(is_min.ravel())
    order = flat[np.argsort(surface.ravel()[flat], kind="stable")][:n]
    if len(order) < n:  # pad with the global minimum so shapes stay rectangular
        order = np.concatenate([order, np.full(n - len(order), order[0] if len(order) else np.argmin(surface))])
    return order


def refine(
    x: np.ndarray,
    Y: np.ndarray,
    r0: float,
    theta0: np.ndarray,
    bounds: Bounds,
    fixed_a: float | None = None,
    max_iter: int = 200,
    rtol: float = 1e-10,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batched, bound-projected Levenberg-Marquardt from theta0 (K, 3) on targets Y (K, n).

    Returns (theta, sse, converged) with converged[k] True when the relative SSE decrease fell
    below rtol (or no step can improve it) before max_iter.
    """
    lo, hi = bounds.lo(), bounds.hi()
    th = np.clip(theta0.astype(float).copy(), lo, hi)
    if fixed_a is not None:
        th[:, 0] = fixed_a
    K = th.shape[0]
    lam = np.full(K, 1e-3)
    done = np.zeros(K, dtype=bool)
    sse, JtJ_all, g_all = _normal_eq(x, Y, r0, th)
    eye = np.eye(3)
    for _ in range(max_iter):
        act = ~done
        if not act.any():
            break
        JtJ, g, tha = JtJ_all[act], g_all[act], th[act]
        # Active set: freeze a parameter sitting on a bound whose descent direction points out
        # (projecting a full step there stalls LM), and A when it is held fixed.
        frozen = ((tha <= lo + 1e-12) & (g < 0)) | ((tha >= hi - 1e-12) & (g > 0))
        if fixed_a is not None:
            frozen[:, 0] = True
        fr2 = frozen[:, :, None] | frozen[:, None, :]
        JtJ = np.where(fr2, 0.0, JtJ) + frozen[:, :, None] * eye
        g = np.where(frozen, 0.0, g)
        diag = np.einsum("kii->ki", JtJ)
        scale = diag + 1e-12 * (diag.sum(1, keepdims=True) + 1e-30)
        M = JtJ + lam[act, None, None] * scale[:, :, None] * eye
        try:
            step = np.linalg.solve(M, g[..., None])[..., 0]
        except np.linalg.LinAlgError:
            step = np.zeros_like(g)
        trial = np.clip(tha + np.nan_to_num(step), lo, hi)
        sse_t, JtJ_t, g_t = _normal_eq(x, Y[act], r0, trial)
        old = sse[act]
        ok = sse_t < old
        ia = np.flatnonzero(act)
        acc = ia[ok]
        th[acc], sse[acc], JtJ_all[acc], g_all[acc] = trial[ok], sse_t[ok], JtJ_t[ok], g_t[ok]
        lam[acc] = np.maximum(lam[acc] * 0.3, 1e-12)
        lam[ia[~ok]] *= 8.0
        small = (old - np.where(ok, sse_t, old)) <= rtol * (old + 1e-300)
        done[ia[ok & small]] = True
        done[ia[~ok & (lam[ia] > 1e10)]] = True  # no damped step helps: at a (possibly bounded) minimum
    return th, sse, done


def _normal_eq(x: np.ndarray, Y: np.ndarray, r0: float, th: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """SSE, J'J (K, 3, 3) and J'r (K, 3) at th, with J = d pred / d (A, m, ln B); J is never stored."""
    d = (th[:, 0] - r0)[:, None]
    B = np.exp(th[:, 2])[:, None]
    z = B * (x[None, :] - th[:, 1:2])
    s = expit(z)
    w = d * s * (1 - s)
    r = Y - r0 - d * s
    cols = (s, -B * w, w * z)
    K = th.shape[0]
    JtJ = np.empty((K, 3, 3))
    for a in range(3):
        for b in range(a, 3):
            JtJ[:, a, b] = JtJ[:, b, a] = np.einsum("kn,kn->k", cols[a], cols[b])
    g = np.stack([np.einsum("kn,kn->k", c, r) for c in cols], axis=1)
    return np.einsum("kn,kn->k", r, r), JtJ, g


def fit_global(
    x: np.ndarray, y: np.ndarray, r0: float, bounds: Bounds, fixed_a: float | None = None, n_m: int = 96, n_b: int = 56, n_starts: int = 6
) -> tuple[np.ndarray, float, bool]:
    """Global least squares for one data set: fine grid, then LM from the best local minima."""
    starts, _ = grid_search(x, y[None, :], r0, bounds, n_m, n_b, fixed_a, n_starts)
    starts = starts[0]
    th, sse, conv = refine(x, np.repeat(y[None, :], len(starts), 0), r0, starts, bounds, fixed_a)
    best = int(np.argmin(sse))
    return th[best], float(sse[best]), bool(conv[best])


@dataclass(frozen=True)
class PointFit:
    """One fit's point estimate: theta = (A, ln C_mid, ln B), its sse, whether LM converged, the
    search bounds, and the fitted values and residuals on the fitted points."""

    theta: np.ndarray
    sse: float
    lm_ok: bool
    bounds: Bounds
    fitted: np.ndarray
    resid: np.ndarray

    @classmethod
    def at(cls, theta: np.ndarray, x: np.ndarray, y: np.ndarray, r0: float, lm_ok: bool, bounds: Bounds,
           sse: float | None = None) -> "PointFit":
        """The point fit at theta: fitted values and residuals computed here, once (sse too,
        unless the optimiser already gave it)."""
        fitted = predict(theta[None, :], r0, x[None, :])[0]
        resid = y - fitted
        return cls(theta, float((resid**2).sum()) if sse is None else sse, lm_ok, bounds, fitted, resid)


def noise_blocks(resid: np.ndarray, run: np.ndarray) -> tuple[float, int]:
    """(lag-1 autocorrelation of the residuals, averaged over runs; the bootstrap block length it
    gives for the median run length)."""
    runs = np.unique(run)
    rho = float(np.mean([lag1_autocorr(resid[run == i]) for i in runs]))
    return rho, block_length(rho, int(np.median(np.bincount(run)[runs])))


def lag1_autocorr(r: np.ndarray) -> float:
    r = r - r.mean()
    den = float(r @ r)
    return float(r[1:] @ r[:-1] / den) if den > 0 and len(r) > 2 else 0.0


def block_length(rho: float, n: int) -> int:
    """Carlstein's (1986) AR(1) rule for the block length: (2 rho / (1 - rho^2))^(2/3) n^(1/3).

    Uncorrelated residuals (rho <= 0) give 1, i.e. the ordinary residual bootstrap.
    """
    rho = min(max(rho, 0.0), 0.95)
    if rho == 0.0:
        return 1
    L = (2 * rho / (1 - rho * rho)) ** (2 / 3) * n ** (1 / 3)
    return int(max(1, min(round(L), max(1, n // 3))))


def block_resample(resid: np.ndarray, length: int, L: int, n_rep: int, rng: np.random.Generator) -> np.ndarray:
    """Moving-block bootstrap: n_rep series of `length` values built from blocks of L in resid."""
    n = len(resid)
    L = max(1, min(L, n))
    n_blocks = -(-length // L)
    starts = rng.integers(0, n - L + 1, size=(n_rep, n_blocks))
    idx = (starts[:, :, None] + np.arange(L)).reshape(n_rep, -1)[:, :length]
    return resid[idx]


def resample_residuals(resid: np.ndarray, run: np.ndarray, p: int, n_rep: int, L: int, rng: np.random.Generator) -> np.ndarray:
    """(n_rep, n) residual series for bootstrap replicates: centred, inflated by sqrt(n / (n - p)),
    moving-block resampled; with several runs each run's slot takes the series of a run drawn
    with replacement (a whole-run resample)."""
    n = len(resid)
    r = (resid - resid.mean()) * np.sqrt(n / max(n - p, 1))
    runs = np.unique(run)
    out = np.zeros((n_rep, n))
    src = rng.integers(0, len(runs), size=(n_rep, len(runs))) if len(runs) > 1 else np.zeros((n_rep, 1), int)
    for i, ri in enumerate(runs):
        slot = np.flatnonzero(run == ri)
        for j, rj in enumerate(runs):
            reps = np.flatnonzero(src[:, i] == j)
            if len(reps):
                out[np.ix_(reps, slot)] = block_resample(r[run == rj], len(slot), L, len(reps), rng)
    return out


def bootstrap(
    x: np.ndarray,
    fitted: np.ndarray,
    resid: np.ndarray,
    run: np.ndarray,
    r0: float,
    theta_hat: np.ndarray,
    bounds: Bounds,
    n_boot: int,
    L: int,
    rng: np.random.Generator,
    fixed_a: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Refit n_boot replicates y* = fitted + resampled residuals. Returns (theta (n_boot, 3), at_bound).

    Residuals are centred and inflated by sqrt(n / (n - p)) (fitted residuals are too small by the
    p parameters they absorbed). With several runs, each run's slot takes the residual series of a
    run drawn with replacement (a whole-run resample) and block-resamples it, so a seed that sits
    systematically high or low moves whole replicates and the seed spread widens the intervals.
    """
    p = 2 if fixed_a is not None else 3
    Ystar = np.clip(fitted[None, :] + resample_residuals(resid, run, p, n_boot, L, rng), 0.0, 1.0)  # scores are pass rates
    # Start each replicate from the better of its coarse-grid optimum and the point estimate.
    g, g_sse = grid_search(x, Ystar, r0, bounds, 48, 32, fixed_a, 1)
    hat = np.repeat(theta_hat[None, :], n_boot, 0)
    hat_sse = ((Ystar - predict(hat, r0, x[None, :])) ** 2).sum(1)
    starts = np.where((hat_sse <= g_sse[:, 0])[:, None], hat, g[:, 0, :])
    theta, _, _ = refine(x, Ystar, r0, starts, bounds, fixed_a, max_iter=100, rtol=1e-8)
    tol = 1e-6
    at_bound = (theta[:, 1] <= bounds.m_lo + tol) | (theta[:, 1] >= bounds.m_hi - tol) | (theta[:, 2] <= bounds.lb_lo + tol) | (theta[:, 2] >= bounds.lb_hi - tol)
    return theta, at_bound


def gain_test(
    x: np.ndarray,
    y: np.ndarray,
    run: np.ndarray,
    r0: float,
    bounds: Bounds,
    sse_fit: float,
    resid: np.ndarray,
    rho: float,
    L: int,
    n_null: int,
    rng: np.random.Generator,
) -> float:
    """p-value of "the sigmoid beats a flat line only as much as it does on flat noise".

    Statistic T = 1 - SSE_sigmoid / SSE_flat (the share of the variance around the mean that the
    sigmoid explains). Its null distribution comes from replicates y* = mean(y) + the sigmoid's
    residuals block-resampled as in `bootstrap` (so autocorrelated noise, which lets a sigmoid
    chase a slow wander, is calibrated for), each fitted on the coarse grid; the observed T is
    taken on the same grid. A grid search is a change-point search, so a plain F-test would call
    noise a gain far too often. Shortcut: when the F-test p-value, with the sample size shrunk by
    the residual autocorrelation, is below 1e-6 (a clear rise: every rising curve), that p is
    returned and no replicates are fitted. The same replicates also calibrate a straight line in
    log-compute (its share of the variance); the p-value returned is the smaller of the two, as
    with 4-8 points a steady early rise is far clearer to a line than to a 3-parameter sigmoid.
    """
    from scipy.stats import f as f_dist

    n = len(y)
    sse_flat = float(((y - y.mean()) ** 2).sum())
    if sse_flat <= 0:
        return 1.0
    t_fit = max(0.0, 1.0 - sse_fit / sse_flat)
    rho = min(max(rho, 0.0), 0.95)
    n_eff = max(4.0, n * (1 - rho) / (1 + rho))
    dof = n_eff - 3
    f_stat = (t_fit / 2) / max((1 - t_fit) / dof, 1e-300)
    p_f = float(f_dist.sf(f_stat, 2, dof))
    if p_f < 1e-6:
        return p_f
    _, g_obs = grid_search(x, y[None, :], r0, bounds, 48, 32, None, 1)
    t_obs = 1.0 - float(g_obs[0, 0]) / sse_flat
    xc = x - x.mean()
    sxx = float(xc @ xc)
    lin_obs = float(((y - y.mean()) @ xc) ** 2 / sxx / sse_flat) if sxx > 0 else 0.0
    # Block length: the larger of the sigmoid's and the flat line's residual rule, since a sigmoid
    # that chased a wander has whitened its residuals (a rise only makes the test stricter).
    flat_rho = float(np.mean([lag1_autocorr((y - y.mean())[run == i]) for i in np.unique(run)]))
    L = max(L, block_length(flat_rho, int(np.median(np.bincount(run)[np.unique(run)]))))
    Ystar = np.clip(y.mean() + resample_residuals(resid, run, 3, n_null, L, rng), 0.0, 1.0)
    _, g = grid_search(x, Ystar, r0, bounds, 48, 32, None, 1)
    flat = ((Ystar - Ystar.mean(1, keepdims=True)) ** 2).sum(1)
    t_null = 1.0 - g[:, 0] / np.maximum(flat, 1e-300)
    p_sig = (1 + np.sum(t_null >= t_obs - 1e-12)) / (n_null + 1)
    if sxx <= 0:
        return float(p_sig)
    # A straight line in log-compute: far more power than the 3-parameter sigmoid against the
    # slow, steady rise of a run's first evaluations; same replicates, same calibration.
    lin_null = ((Ystar - Ystar.mean(1, keepdims=True)) @ xc) ** 2 / sxx / np.maximum(flat, 1e-300)
    p_lin = (1 + np.sum(lin_null >= lin_obs - 1e-12)) / (n_null + 1)
    return float(min(p_sig, p_lin))
