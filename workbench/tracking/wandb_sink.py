"""`WandbSink`: the MetricSink that logs one run's config, metrics and files to Weights & Biases.

The same interface as `MlflowSink`, beside it: with `tracking.wandb: {project: NAME}` the engine
logs every row to both (`wandb_sinks(cfg)`), and `run_tracking.log_fit` adds the fit's metrics and
files. The W&B run is opened lazily in the process that logs (the coordinator's Ray actor), so the
sink is picklable.

    sink = WandbSink(WandbConfig(project="gsm8k"), out_dir, run_name="qwen0.5b", run_id=mlflow_run_id)
    sink.log_config(to_dict(cfg))                     # flattened into the W&B config
    sink.log_metrics({"val/pass_rate": 0.41}, step=10)
    sink.log_samples(10, "train", records)             # the step's kept completions, a table
    sink.log_artifact("runs/x/fit.json", "fit")        # a W&B artifact holding fit/fit.json
    sink.close("FINISHED")                             # FAILED: exit code 1

- One W&B run per workbench run, across resumes: its id, chosen at the run's fresh start (the
  MLflow run's id when there is one, else a new one), is kept in `<run>/wandb_run_id.txt`; a
  resume (and `log_fit`, another process, after the end) reopens that run.
- Mode: `tracking.wandb.mode`, else $WANDB_MODE, else online when W&B's server answers within 2 s
  and offline when it does not. Offline runs are files under $WANDB_DIR, else the run folder
  (`<run>/wandb/offline-run-*`, one folder per launch of the run); `wandb sync` uploads them later.
- Steps: every row carries the run's step as the metric `step`, W&B's x axis for all the others
  (`define_metric`), since W&B's own step only goes forward and a validation row can come after a
  later train row.
- Live: each row is logged as it comes; W&B's local transaction log is flushed every second
  (`FLUSH_SECONDS`), so a killed run's log holds all but its last second.
- W&B cannot take history back (`takes_back = False`), so after a restart the engine's
  `AppendOnlySink` asks `points_after(step)`, read from the run's transaction logs
  (`wandb_log.py`), and does not send again a redone point W&B holds: each step is there once.
- Completions: `log_samples` logs a step's kept samples as a `wandb.Table` under `completions`
  (train) or `val/completions`, as TRL's `log_completions` does: step, prompt (as rendered),
  completion, reward and each reward function's, passed, advantage, loss weight, trained, ...

Like every sink it never raises into the training loop: a failure is warned about once and dropped.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import string
import urllib.parse
import warnings
from pathlib import Path
from typing import Any, Optional

from workbench.config import RunConfig, WandbConfig
from workbench.configtools import flatten

STEP_KEY = "step"  # the x axis of every metric, as in metrics.jsonl
ID_FILE = "wandb_run_id.txt"  # in the run folder: the W&B run every launch of this run logs to
FLUSH_SECONDS = 1.0  # W&B's transaction log is flushed this often (wandb's default: 15 s)
TABLE_KEYS = {"train": "completions", "val": "val/completions"}  # a step's kept samples, as TRL names them
_DEFAULT_BASE_URL = "https://api.wandb.ai"


def wandb_sinks(cfg: RunConfig) -> list["WandbSink"]:
    """The W&B sink the config asks for (`tracking.wandb.project`), or none."""
    w = cfg.tracking.wandb
    if not w.project:
        return []
    return [WandbSink(w, cfg.output_dir(), run_name=cfg.name, run_id=cfg.tracking.run_id)]


def server_answers(base_url: Optional[str] = None, timeout: float = 2.0) -> bool:
    """Whether W&B's server ($WANDB_BASE_URL, else api.wandb.ai) accepts a connection."""
    url = urllib.parse.urlparse(base_url or os.environ.get("WANDB_BASE_URL") or _DEFAULT_BASE_URL)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_mode(mode: Optional[str]) -> str:
    """The config's mode, else $WANDB_MODE, else online if the server answers, else offline."""
    return mode or os.environ.get("WANDB_MODE", "").strip() or ("online" if server_answers() else "offline")


class WandbSink:
    """MetricSink writing to one W&B run (see the module doc)."""

    takes_back = False  # W&B history cannot be rewritten: the engine reconciles (sink.AppendOnlySink)

    def __init__(self, wandb: WandbConfig, out_dir: str | Path, *, run_name: str, run_id: Optional[str] = None):
        self.settings = wandb
        self.out_dir = str(out_dir)
        self.run_name = wandb.name or run_name
        self.run_id = run_id  # the MLflow run's id, when there is one
        self._run: Any = None
        self._closed = False
        self._warned: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:  # the run lives in the process that opened it
        state = dict(self.__dict__)
        state["_run"] = None
        return state

    @property
    def id_file(self) -> Path:
        return Path(self.out_dir) / ID_FILE

    @property
    def wandb_id(self) -> str:
        """The W&B run's id: the one kept in the run folder (set at the run's fresh start), else the
        MLflow run's, else a new one (then kept)."""
        if self.id_file.is_file():
            return self.id_file.read_text().strip()
        return self.run_id or self._new_id()

    def _new_id(self) -> str:
        new = self.run_id or "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))  # W&B's form
        self.id_file.parent.mkdir(parents=True, exist_ok=True)
        self.id_file.write_text(new + "\n")
        return new

    def start_fresh(self) -> None:
        """A fresh start of the run in this folder: a new W&B run (not a resume of an old one's)."""
        self._new_id()

    @property
    def wandb_root(self) -> Path:
        """Where W&B writes this run's folders: $WANDB_DIR, else the run folder."""
        return Path(os.environ.get("WANDB_DIR") or self.out_dir)

    @property
    def run(self) -> Any:
        if self._run is None:
            import wandb

            _own_service()
            directory = None if os.environ.get("WANDB_DIR") else self.out_dir  # wandb reads $WANDB_DIR itself
            if directory:
                Path(directory).mkdir(parents=True, exist_ok=True)
            self._run = wandb.init(
                project=self.settings.project, entity=self.settings.entity, name=self.run_name, id=self.wandb_id,
                resume="allow", mode=resolve_mode(self.settings.mode), dir=directory,
                reinit="create_new",  # a kernel or actor may hold several runs; never finish another's
                settings=wandb.Settings(x_transaction_log_flush_interval=FLUSH_SECONDS),
            )  # fmt: skip
            self._run.define_metric(STEP_KEY)
            self._run.define_metric("*", step_metric=STEP_KEY)
        return self._run

    def points_after(self, step: int) -> dict[int, set[str]]:
        """{step: keys} that this run's transaction logs hold past `step` (a table as `samples/<kind>`)."""
        from workbench.tracking import wandb_log

        try:
            files = sorted(self.wandb_root.glob(f"**/run-{self.wandb_id}.wandb"), key=lambda p: p.parent.name)
            held = wandb_log.points_after(wandb_log.history_rows(files), step, STEP_KEY)
        except Exception as e:  # noqa: BLE001 - an unreadable log: nothing known held
            self._warn_once("reading its transaction log", e)
            return {}
        names = {v: f"samples/{k}" for k, v in TABLE_KEYS.items()}
        return {s: {names.get(k, k) for k in keys} for s, keys in held.items()}

    def _warn_once(self, kind: str, exc: BaseException) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            warnings.warn(f"W&B {kind} for run {self.run_name} failed ({exc}); carrying on", RuntimeWarning, stacklevel=3)

    def log_config(self, config: dict[str, Any]) -> None:
        """Every config value under its dotted key (recipe.loss.type = cispo), as MLflow's params."""
        try:
            self.run.config.update(flatten(config), allow_val_change=True)
        except Exception as e:  # noqa: BLE001 - logging must not stop training
            self._warn_once("log_config", e)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """One history row; None and non-numeric values are skipped, as MlflowSink skips them."""
        row: dict[str, Any] = {STEP_KEY: int(step)}
        for key, value in metrics.items():
            if value is None or isinstance(value, bool):
                continue
            try:
                row[str(key)] = float(value)
            except (TypeError, ValueError):
                continue
        try:
            self.run.log(row)
        except Exception as e:  # noqa: BLE001
            self._warn_once("log_metrics", e)

    def log_samples(self, step: int, kind: str, records: list[dict[str, Any]]) -> None:
        """A step's kept samples as one table (`TABLE_KEYS`), a column per field, `step` first."""
        if not records or not self.settings.log_completions:
            return
        try:
            import wandb

            columns = ["step"] + list(dict.fromkeys(k for r in records for k in r if k not in ("step", "kind")))
            data = [[int(step)] + [_cell(r.get(k)) for k in columns[1:]] for r in records]
            self.run.log({STEP_KEY: int(step), TABLE_KEYS.get(kind, f"{kind}/completions"): wandb.Table(columns=columns, data=data)})
        except Exception as e:  # noqa: BLE001
            self._warn_once("log_samples", e)

    def log_artifact(self, path: str | Path, artifact_path: Optional[str] = None) -> None:
        """A file (or folder) as a W&B artifact of the run, under `artifact_path` inside it."""
        import wandb

        p = Path(path)
        try:
            if not p.exists():
                raise FileNotFoundError(f"no such file: {p}")
            kind = artifact_path or "files"  # one artifact per file: a shared name would keep only its last version in view
            art = wandb.Artifact(f"run-{self.run.id}-{kind}-{p.name}", type=kind)
            if p.is_dir():
                art.add_dir(str(p), name=artifact_path)
            else:
                art.add_file(str(p), name=f"{artifact_path}/{p.name}" if artifact_path else p.name)
            self.run.log_artifact(art)
        except Exception as e:  # noqa: BLE001
            self._warn_once("log_artifact", e)

    def set_tags(self, tags: dict[str, Any]) -> None:
        """Run tags go to the W&B summary as text (W&B's own tags are labels, not key-value pairs)."""
        try:
            for k, v in tags.items():
                self.run.summary[str(k)] = str(v)
        except Exception as e:  # noqa: BLE001
            self._warn_once("set_tags", e)

    def close(self, status: str = "FINISHED") -> None:
        """Finish the W&B run: exit code 1 for FAILED, 0 otherwise. Closing twice is a no-op."""
        if self._closed or self._run is None:
            self._closed = True
            return
        try:
            self._run.finish(exit_code=1 if str(status).upper() == "FAILED" else 0)
        except Exception as e:  # noqa: BLE001
            self._warn_once("close", e)
        self._closed = True


def _own_service() -> None:
    """Log through a W&B service this process starts, not one it inherited ($WANDB_SERVICE names the
    process that started it: a Ray worker of a driver that used W&B): a shared service would keep a
    killed launch's run "in use", and the resume could not reopen it."""
    parts = os.environ.get("WANDB_SERVICE", "").split("-")
    if len(parts) > 1 and parts[1] != str(os.getpid()):
        os.environ.pop("WANDB_SERVICE", None)


def _cell(value: Any) -> Any:
    """A table cell W&B can hold: NaN (an untrained sample's advantage) as None, numpy scalars as Python's."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value
