"""Every step once in every sink: JsonlSink.rollback, MlflowSink.rollback (live, a database store) and
CommitGatedSink (a store that cannot take points back) against a real SQLite MLflow store."""

from __future__ import annotations

from mlflow import MlflowClient

from workbench.tracking.mlflow_sink import MlflowSink
from workbench.tracking.sink import CommitGatedSink, JsonlSink, MetricSink, read_jsonl, rewindable
from workbench.tracking.store import create_run


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key))


def test_jsonl_rollback_drops_later_rows_and_keeps_appending(tmp_path):
    sink = JsonlSink(tmp_path / "metrics.jsonl")
    for step in range(1, 6):
        sink.log_metrics({"loss": float(step)}, step)
    sink.rollback(3)
    sink.log_metrics({"loss": 40.0}, 4)
    sink.close()
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [(r["step"], r["loss"]) for r in rows] == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0)]


def test_a_database_store_gets_every_step_live_and_a_rollback_deletes_the_redone_ones(tracking_uri, experiment):
    run_id = create_run(experiment, "live", tracking_uri=tracking_uri)
    sink = rewindable(MlflowSink(run_id, tracking_uri))
    assert isinstance(sink, MlflowSink) and sink.takes_back, "a SQLite store is written live, not gated"
    for step in range(1, 6):
        sink.log_metrics({"loss": float(step), "val": step / 10}, step)
        assert _history(tracking_uri, run_id, "loss")[-1] == (step, float(step)), "no wait for a checkpoint"
    sink.log_metrics({"val": 0.25}, 2)  # a late evaluation of step 2: kept by the rollback below
    sink.rollback(2)  # died during step 6: back to the step-2 checkpoint, 3..5 are redone
    assert _history(tracking_uri, run_id, "loss") == [(1, 1.0), (2, 2.0)]
    client = MlflowClient(tracking_uri)
    assert client.get_run(run_id).data.metrics["loss"] == 2.0, "the run's latest value follows the rollback"
    for step in range(3, 6):
        sink.log_metrics({"loss": 10.0 * step}, step)
    assert _history(tracking_uri, run_id, "loss") == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]
    assert sorted(_history(tracking_uri, run_id, "val")) == [(1, 0.1), (2, 0.2), (2, 0.25)]
    assert client.get_run(run_id).data.metrics == {"loss": 50.0, "val": 0.25}
    # a resume in another process: a fresh sink on the same run takes back what the last one sent
    again = MlflowSink(run_id, tracking_uri)
    again.rollback(4)
    assert _history(tracking_uri, run_id, "loss")[-1] == (4, 40.0)
    again.close("FINISHED")
    assert client.get_run(run_id).info.status == "FINISHED"


def test_a_tracking_server_cannot_take_points_back_so_it_is_gated():
    sink = rewindable(MlflowSink("0" * 32, "http://127.0.0.1:5000"))
    assert isinstance(sink, CommitGatedSink) and not sink.inner.takes_back


def test_gated_sink_sends_only_committed_steps_and_drops_rolled_back_ones(tracking_uri, experiment):
    run_id = create_run(experiment, "gated", tracking_uri=tracking_uri)
    sink = CommitGatedSink(MlflowSink(run_id, tracking_uri))  # as a store that cannot delete is held
    assert isinstance(sink, MetricSink)
    for step in range(1, 6):
        sink.log_metrics({"loss": float(step)}, step)
    assert _history(tracking_uri, run_id, "loss") == []  # nothing before a checkpoint
    sink.commit(2)
    assert _history(tracking_uri, run_id, "loss") == [(1, 1.0), (2, 2.0)]
    sink.rollback(2)  # died during step 6: back to the step-2 checkpoint, 3..5 are redone
    for step in range(3, 6):
        sink.log_metrics({"loss": 10.0 * step}, step)
    sink.log_metrics({"val": 0.5}, 2)  # an evaluation of a committed step goes at once
    assert _history(tracking_uri, run_id, "val") == [(2, 0.5)]
    sink.close("FINISHED")  # a clean end sends the rest
    assert _history(tracking_uri, run_id, "loss") == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0), (5, 50.0)]
    assert MlflowClient(tracking_uri).get_run(run_id).info.status == "FINISHED"


def test_gated_sink_keeps_uncommitted_steps_back_on_failure_and_says_so(tracking_uri, experiment):
    run_id = create_run(experiment, "gated-fail", tracking_uri=tracking_uri)
    sink = CommitGatedSink(MlflowSink(run_id, tracking_uri), committed=4)  # resumed at step 4
    for step in range(5, 8):
        sink.log_metrics({"loss": float(step)}, step)
    sink.close("FAILED")
    run = MlflowClient(tracking_uri).get_run(run_id)
    assert _history(tracking_uri, run_id, "loss") == []
    assert run.data.tags["workbench.uncommitted_steps"].startswith("5-7")
    assert run.info.status == "FAILED"


def test_rewindable_leaves_jsonl_and_gated_sinks_as_they_are(tmp_path):
    j = JsonlSink(tmp_path / "m.jsonl")
    assert rewindable(j) is j
    g = CommitGatedSink(j)
    assert rewindable(g) is g
    j.close()
