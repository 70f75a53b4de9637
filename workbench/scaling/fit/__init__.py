"""Fitting a curve: the ScaleRL sigmoid (sigmoid.py, its numerics and its result), the history prior,
the paper's procedure, and the two other families (stretched exponential, power law).

Import from the modules (workbench.scaling.fit.sigmoid, ...) or from workbench.scaling; this
package's door imports nothing, so fit/, forecast/ and decide/ never import each other's doors.
"""
