"""`WandbSink`: the MetricSink that logs one run's config, metrics and files to Weights & Biases.

The same interface as `MlflowSink`, beside it: with `tracking.wandb: {project: NAME}` the engine
logs every row to both (`wandb_sinks(cfg)`), and `run_tracking.log_fit` adds the fit's metrics and
files. The W&B run is opened lazily in the process that logs (the coordinator's Ray actor), so the
sink is picklable.

    sink = WandbSink(WandbConfig(project="gsm8k"), out_dir, run_name="qwen0.5b", run_id=mlflow_run_id)
    sink.log_config(to_dict(cfg))                     # flattened into the W&B config
    sink.log_metrics({"val/pass_rate": 0.41}, step=10)
    sink.log_artifact("runs/x/fit.json", "fit")        # a W&B artifact holding fit/fit.json
    sink.close("FINISHED")                             # FAILED: exit code 1

- The run's id is the MLflow run's id when there is one, so a resumed run continues its W&B run
  and `log_fit` (another process, after the end) finds it; without MLflow each launch is a new one.
- Mode: `tracking.wandb.mode`, else $WANDB_MODE, else online when W&B's server answers within 2 s
  and offline when it does not. Offline runs are files under $WANDB_DIR, else the run folder
  (`<run>/wandb/offline-run-*`); `wandb sync` uploads them later.
- Steps: every row carries the run's step as the metric `step`, W&B's x axis for all the others
  (`define_metric`), since W&B's own step only goes forward and a validation row can come after a
  later train row.
- W&B cannot take history back, so the engine holds a step until a checkpoint covers it
  (`takes_back = False`: `workbench.tracking.sink.CommitGatedSink`); its charts lag by up to
  `checkpoint.every_steps`, and each step is there once.

Like every sink it never raises into the training loop: a failure is warned about once and dropped.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
import warnings
from pathlib import Path
from typing import Any, Optional

from workbench.config import RunConfig, WandbConfig
from workbench.configtools import flatten

STEP_KEY = "step"  # the x axis of every metric, as in metrics.jsonl
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

    takes_back = False  # W&B history cannot be rewritten: the engine gates this sink

    def __init__(self, wandb: WandbConfig, out_dir: str | Path, *, run_name: str, run_id: Optional[str] = None):
        self.settings = wandb
        self.out_dir = str(out_dir)
        self.run_name = wandb.name or run_name
        self.run_id = run_id
        self._run: Any = None
        self._closed = False
        self._warned: set[str] = set()

    def __getstate__(self) -> dict[str, Any]:  # the run lives in the process that opened it
        state = dict(self.__dict__)
        state["_run"] = None
        return state

    @property
    def run(self) -> Any:
        if self._run is None:
            import wandb

            directory = None if os.environ.get("WANDB_DIR") else self.out_dir  # wandb reads $WANDB_DIR itself
            if directory:
                Path(directory).mkdir(parents=True, exist_ok=True)
            self._run = wandb.init(
                project=self.settings.project, entity=self.settings.entity, name=self.run_name, id=self.run_id,
                resume="allow" if self.run_id else None, mode=resolve_mode(self.settings.mode), dir=directory,
                reinit="create_new",  # a kernel or actor may hold several runs; never finish another's
            )  # fmt: skip
            self._run.define_metric(STEP_KEY)
            self._run.define_metric("*", step_metric=STEP_KEY)
        return self._run

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

