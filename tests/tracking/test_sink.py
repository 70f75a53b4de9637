"""tracking/sink.py: reading metrics.jsonl whole and incrementally (JsonlTail, the sweep's poller)."""

from __future__ import annotations

from workbench.tracking.sink import JsonlSink, JsonlTail, read_jsonl


def test_read_jsonl_skips_a_torn_last_line_and_blank_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n\n{"step": 2}\n{"step": 3, "val/pa')
    assert read_jsonl(path) == [{"step": 1}, {"step": 2}]
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_tail_reads_only_what_was_appended_and_waits_for_a_line_being_written(tmp_path):
    path = tmp_path / "metrics.jsonl"
    tail = JsonlTail(path)
    assert tail.rows() == []  # no file yet
    sink = JsonlSink(path)
    sink.log_metrics({"loss": 1.0}, step=1)
    assert tail.rows() == [{"step": 1, "loss": 1.0}]
    with open(path, "a") as fh:  # a writer caught mid-line
        fh.write('{"step": 2, "lo')
    assert tail.rows() == [{"step": 1, "loss": 1.0}]
    with open(path, "a") as fh:
        fh.write('ss": 0.5}\n')
    assert tail.rows() == [{"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5}]
    assert tail.rows() == read_jsonl(path)


def test_tail_rereads_a_file_that_a_rollback_replaced(tmp_path):
    path = tmp_path / "metrics.jsonl"
    sink, tail = JsonlSink(path), JsonlTail(path)
    for s in (1, 2, 3):
        sink.log_metrics({"loss": float(s)}, step=s)
    assert [r["step"] for r in tail.rows()] == [1, 2, 3]
    sink.rollback(1)  # steps 2-3 are redone: the file is rewritten
    for s in (2, 3, 4):
        sink.log_metrics({"loss": 10.0 + s}, step=s)  # now longer than before: only the new file tells
    assert tail.rows() == read_jsonl(path) == [{"step": 1, "loss": 1.0}] + [{"step": s, "loss": 10.0 + s} for s in (2, 3, 4)]
