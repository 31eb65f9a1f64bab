"""The α–β fit recovers known parameters from synthetic data."""

import math

import numpy as np
import pytest

from collbench.analysis.fit import fit_alpha_beta, fit_rows
from collbench.analysis.report import fit_table
from results_helpers import row_from_samples

SIZES = 2.0 ** np.arange(3, 27)          # 8 B .. 64 MiB


def synthetic(alpha_us, beta_gbps, noise, seed=0):
    t = alpha_us + SIZES / (beta_gbps * 1e3)
    return t * (1 + noise * np.random.default_rng(seed).standard_normal(len(SIZES)))


@pytest.mark.parametrize("alpha_us, beta_gbps", [(3.0, 12.0), (25.0, 1.5), (0.8, 150.0)])
@pytest.mark.parametrize("seed", range(3))
def test_recovers_alpha_and_beta_from_noisy_data(alpha_us, beta_gbps, seed):
    fit = fit_alpha_beta(SIZES, synthetic(alpha_us, beta_gbps, noise=0.01, seed=seed))
    assert fit.alpha_us == pytest.approx(alpha_us, rel=0.03)
    assert fit.beta_gbps == pytest.approx(beta_gbps, rel=0.03)
    assert fit.half_peak_bytes == pytest.approx(alpha_us * beta_gbps * 1e3, rel=0.06)
    assert 0.003 < fit.rms_rel_error < 0.02
    assert fit.points == len(SIZES)


def test_exact_data_is_fitted_exactly_and_half_peak_means_half_bandwidth():
    fit = fit_alpha_beta(SIZES, synthetic(5.0, 8.0, noise=0.0))
    assert (fit.alpha_us == pytest.approx(5.0, rel=1e-9)
            and fit.beta_gbps == pytest.approx(8.0, rel=1e-9))
    assert fit.rms_rel_error < 1e-9
    n_half = fit.half_peak_bytes
    bandwidth_gbps = n_half / float(fit.predict_us(n_half)) / 1e3
    assert bandwidth_gbps == pytest.approx(fit.beta_gbps / 2)


def test_small_sizes_are_not_ignored():
    """Unweighted least squares would lose α under the large sizes' absolute errors."""
    t = synthetic(2.0, 10.0, noise=0.0)
    t[SIZES > 1 << 20] *= 1.05                     # a 5% wobble at large sizes only
    fit = fit_alpha_beta(SIZES, t)
    assert fit.alpha_us == pytest.approx(2.0, rel=0.05)


def test_boundaries_constant_time_and_pure_bandwidth():
    flat = fit_alpha_beta(SIZES, np.full(len(SIZES), 4.0))
    assert (flat.alpha_us == pytest.approx(4.0) and math.isinf(flat.beta_gbps)
            and math.isinf(flat.half_peak_bytes))
    linear = fit_alpha_beta(SIZES, SIZES / 2e3)
    assert (linear.alpha_us == 0.0 and linear.beta_gbps == pytest.approx(2.0)
            and linear.half_peak_bytes == 0.0)
    # never negative parameters
    falling = fit_alpha_beta([8, 64, 512, 4096], [10.0, 9.0, 8.0, 7.0])
    assert falling.alpha_us > 0 and math.isinf(falling.beta_gbps)


def test_too_few_points_and_unusable_points():
    assert fit_alpha_beta([8, 16], [1.0, 2.0]) is None
    assert fit_alpha_beta([0, 8, 16, 32], [1.0, 2.0, float("nan"), 3.0]) is None
    assert fit_alpha_beta([8, 16, 32], [1.0, 0.0, 3.0]) is None
    assert fit_alpha_beta([8, 16, 32, 64], [1.0, 2.0, 0.0, 3.0]).points == 3


def test_fit_rows_groups_by_collective_and_backend_and_uses_bus_factor():
    rows = []
    for backend, alpha_us in (("mpi", 3.0), ("mpi-pickle", 30.0)):
        for size in (8, 1024, 65536, 1 << 20):
            t = alpha_us + size / 4e3                                 # β = 4 GB/s
            rows.append(row_from_samples([t] * 7, backend=backend, size_bytes=size, world_size=4))
    rows.append(row_from_samples([5.0] * 7, collective="barrier", size_bytes=0, world_size=4))
    fits = {g.field("backend"): g for g in fit_rows(rows)}
    assert set(fits) == {"mpi", "mpi-pickle"}                        # barrier has no size: no fit
    assert (fits["mpi"].fit.alpha_us == pytest.approx(3.0)
            and fits["mpi-pickle"].fit.alpha_us == pytest.approx(30.0))
    assert fits["mpi"].fit.beta_gbps == pytest.approx(4.0)
    assert fits["mpi"].bus_factor == pytest.approx(1.5)               # allreduce, 4 ranks: 2(n-1)/n
    assert fits["mpi"].bus_beta_gbps == pytest.approx(6.0)
    table = fit_table(list(fits.values()))
    assert table.cells[0][:2] == ("allreduce", "mpi") and table.cells[0][3] == "3.00"
