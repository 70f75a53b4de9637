"""Decisions from fits: is more compute worth it (gain), which recipe wins (compare), which sweep
points to stop (early_stop), and whether the curve pins its ceiling (ceiling).

Import from the modules (workbench.scaling.decide.gain, ...) or from workbench.scaling; this
package's door imports nothing.
"""
