"""Every step once in every sink, live: JsonlSink.rollback, MlflowSink.rollback (a database store) and
AppendOnlySink (a store that cannot take points back: it reconciles) against a real SQLite MLflow
store, and against a real `mlflow server` over http."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from workbench.tracking.mlflow_sink import MlflowSink
from workbench.tracking.sink import AppendOnlySink, JsonlSink, MetricSink, read_jsonl, rewindable
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


def test_a_tracking_server_cannot_take_points_back_so_it_is_reconciled():
    sink = rewindable(MlflowSink("0" * 32, "http://127.0.0.1:5000"))
    assert isinstance(sink, AppendOnlySink) and not sink.inner.takes_back


def _append_only_run(sink: AppendOnlySink, uri: str, run_id: str) -> None:
    """Steps 1..5 live, a restart from the step-2 checkpoint, the redone 3..6, a late evaluation."""
    for step in range(1, 6):
        sink.log_metrics({"loss": float(step)}, step)
        assert _history(uri, run_id, "loss")[-1] == (step, float(step)), "live: no wait for a checkpoint"
    sink.commit(2)
    sink.log_metrics({"val": 0.2}, 2)  # an evaluation of the checkpointed step, logged after step 5


def test_append_only_sink_is_live_and_keeps_each_redone_step_once(tracking_uri, experiment):
    run_id = create_run(experiment, "append-only", tracking_uri=tracking_uri)
    sink = AppendOnlySink(MlflowSink(run_id, tracking_uri))  # as a store that cannot delete is held
    assert isinstance(sink, MetricSink)
    _append_only_run(sink, tracking_uri, run_id)
    sink.rollback(2)  # died during step 6: back to the step-2 checkpoint, 3..5 are redone
    assert sink.held_steps == [3, 4, 5]
    for step in range(3, 7):
        sink.log_metrics({"loss": 10.0 * step, "val": step / 10} if step == 4 else {"loss": 10.0 * step}, step)
    sink.close("FINISHED")
    # 3..5 as the store first got them, 6 as redone; the evaluation at 4 the lost timeline never logged is there
    assert _history(tracking_uri, run_id, "loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 5.0), (6, 60.0)]
    assert _history(tracking_uri, run_id, "val") == [(2, 0.2), (4, 0.4)]
    run = MlflowClient(tracking_uri).get_run(run_id)
    assert run.data.tags[AppendOnlySink.EARLIER_TAG].startswith("3-5: logged before the restart from step 2")
    assert run.info.status == "FINISHED"


def test_after_a_killed_driver_the_store_says_what_it_holds(tracking_uri, experiment):
    """A resume in a new process: the new sink knows nothing it sent; the store's history tells it."""
    run_id = create_run(experiment, "append-only-resume", tracking_uri=tracking_uri)
    _append_only_run(AppendOnlySink(MlflowSink(run_id, tracking_uri)), tracking_uri, run_id)  # then killed: no close
    again = AppendOnlySink(MlflowSink(run_id, tracking_uri))
    again.rollback(2)
    assert again.held_steps == [3, 4, 5]
    for step in range(3, 8):
        again.log_metrics({"loss": 10.0 * step}, step)
    again.commit(6)
    assert again.held_steps == [], "a committed step is final: nothing held for it any more"
    assert [s for s, _ in _history(tracking_uri, run_id, "loss")] == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.slow
def test_a_real_tracking_server_gets_each_step_live_and_once_across_a_resume(mlflow_server, tmp_path):
    """MLflow over http (`mlflow server` on 127.0.0.1): every step live, a killed driver's resume
    leaves each step once, and the run says which steps hold the lost timeline's values."""
    from workbench.tracking.store import ensure_experiment

    uri = mlflow_server
    ensure_experiment("http", uri)
    run_id = create_run("http", "over-http", tracking_uri=uri)
    first = rewindable(MlflowSink(run_id, uri))
    assert isinstance(first, AppendOnlySink)
    _append_only_run(first, uri, run_id)  # killed here
    second = rewindable(MlflowSink(run_id, uri))
    second.rollback(2)
    for step in range(3, 9):
        second.log_metrics({"loss": 10.0 * step}, step)
    second.close("FINISHED")
    assert [s for s, _ in _history(uri, run_id, "loss")] == list(range(1, 9))
    run = MlflowClient(uri).get_run(run_id)
    assert run.data.tags[AppendOnlySink.EARLIER_TAG].startswith("3-5") and run.info.status == "FINISHED"


def test_rewindable_leaves_jsonl_and_wrapped_sinks_as_they_are(tmp_path):
    j = JsonlSink(tmp_path / "m.jsonl")
    assert rewindable(j) is j
    g = AppendOnlySink(j)
    assert rewindable(g) is g
    j.close()
