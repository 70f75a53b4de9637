"""The sweep's stop-request protocol, under its old path: it lives in `workbench.runs.stop_request`
(below the session and the sweep, so `workbench.Session` checks it without importing the sweep)."""

from workbench.runs.stop_request import STOP_REQUEST_ENV, StopWatch, request_stop, stop_env, stop_requested

__all__ = ["STOP_REQUEST_ENV", "StopWatch", "request_stop", "stop_env", "stop_requested"]
