"""GPU calibration: microbenchmarks, profile files and operator regressors.

- Measuring (runs on the bare GPU image; torch only, imported lazily): :mod:`.runner`
  (``RunRequest``, ``run_calibration``), one module per family (:mod:`.gemm`, :mod:`.attention`,
  :mod:`.memory_ops`, :mod:`.moe`, :mod:`.overhead`, :mod:`.comm`), :mod:`.grid` (the grids as
  data), :mod:`.timing`, :mod:`.run_device` (the device-machine entry point).
- Fitting (development machine, xgboost): :mod:`.fit` (``fit_profile``), :mod:`.fit_fixed`.
- Using: :mod:`.profile` (folders and validation), :mod:`.predict`, :mod:`.tabulate`, and
  :class:`latsim.costmodel.calibrated.CalibratedCostModel`.

Nothing is imported here, so ``python3 -m latsim.calibration.run_device`` stays light.
"""
