"""Reading and evaluating a GPU profile (measured tables, fitted regressors) for the calibrated
cost model.  Producing profiles (microbenchmarks, fits) is :mod:`latsim.calibration`'s job; it
imports this package, never the other way round."""
