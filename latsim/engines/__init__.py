"""Serving engines: one folder each, holding everything specific to that engine, and a ``SPEC``
(:class:`latsim.sim.engine_spec.EngineSpec`) registered in :mod:`latsim.registry`."""
