"""The manual's dashboard pictures (docs/dashboard-*.png), taken from real runs in headless Chromium.

    flock /tmp/heavy.lock .venv/bin/python benchmarks/docs_screenshots.py [--steps 30] [--run runs/docs-smollm2] \
        [--health-run runs/docs-lr100x] [--out docs] [--rerun] [--env-run RUN [--env-step N] [--all]]

Two runs, each made by `workbench run --fresh` in a subprocess (MLflow off) unless its folder
already holds a finished run (summary.json; `--rerun` makes them again), and a third, an
environment's, made beforehand (`--env-run`):

- `--run`: `configs/smollm2.yaml` (SmolLM2-135M-Instruct on word problems, the README's second route)
  cut to `--steps` trainer steps (30: the pass rate's take-off, 0.07 -> 0.59; 18 minutes on 2 busy cores),
  evaluations every 5 steps as shipped. Its Samples tab gives three pictures:
  dashboard-samples.png (the train completions at an evaluation step, filtered to the failures),
  dashboard-group.png (a trained group with passes and failures, its advantages) and
  dashboard-side-by-side.png (step 0 against the last evaluation); dashboard-curve.png is the
  whole dashboard, curve and fit.
- `--health-run`: a run with a health flag for dashboard-health.png, the banner. A healthy route
  raises none, so this is `benchmarks/bench_health.py`'s `lr-100x`: the quickstart at 100x its
  learning rate (2e-2), 60 steps (73 s), whose groups all fail within 5 steps (2026-12-07: the
  `zero_variance` flag at step 5).
- `--env-run`: a tool environment's run folder with kept samples, for dashboard-conversation.png: one
  training episode in the Samples tab, turn by turn (the assistant's `<tool_call>`s, the tools'
  results, the submit, its last words). Not made here: it is a seed of `benchmarks/bench_env_learning.py`
  on configs/smollm2-tools.yaml (SmolLM2-135M-Instruct on the calculator; a GPU, ~40 minutes):

      .venv/bin/python -m workbench.envs.calculator data/calculator-fewshot.jsonl 2000 0 --few-shot
      .venv/bin/python benchmarks/bench_env_learning.py --config configs/smollm2-tools.yaml --seeds 0 --out runs/bench-env

  then `--env-run runs/bench-env/smollm2-tools__seed0`. The episode (`pick_episode`): a passing train
  episode with a tool call answered by its result and a last assistant turn that calls nothing, the
  only pass of its group where one is, at the latest such step (`--env-step N`: at step N). The
  table is narrowed to it as a user would: that step, train, passed, and a search for its question
  (the prompt's last line's first sentence) or, where that picks more, its first tool call; its
  folded conversation is then opened with a click. With `--env-run` only this picture is taken
  (the other two runs are neither made nor read) unless `--all` is given too.

Each dashboard is opened in a real JupyterLab on 127.0.0.1 (the `workbench` kernel installed
into a temporary prefix), a notebook cell `Dashboard(RunView.open(run))`; the script then puts the
dashboard in the state each picture shows through further cells (`open_samples`, the filters), so
the pictures show what a user clicking through sees. Chromium is Debian's (/usr/bin/chromium,
`make browser`); nothing is downloaded. The pictures are written to `--out` (docs/) and the
choices made (steps, groups) are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CHROMIUM = "/usr/bin/chromium"
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 1700}
MAX_HEIGHT = 1500  # a picture's most pixels down: a long table or side by side is cut there (its start shows the view)
SPECIAL = re.compile(r"<\|[^|>]*\|>")  # a chat template's markers (<|im_start|>): not part of a question


def ensure_run(out: Path, argv: list[str], rerun: bool) -> Path:
    """`workbench run ARGV --out OUT --fresh` unless OUT holds a finished run (its summary.json)."""
    if (out / "summary.json").is_file() and not rerun:
        print(f"using the finished run in {out}", flush=True)
        return out
    cmd = [sys.executable, "-m", "workbench.cli", "run", *argv, "--set", "tracking.mlflow=false", "--out", str(out),
           "--fresh", "--quiet"]  # fmt: skip
    print("running:", " ".join(cmd), flush=True)
    t0 = time.time()
    subprocess.run(cmd, cwd=REPO, check=True)
    print(f"  done in {time.time() - t0:.0f} s", flush=True)
    return out


def pick_steps(run: Path) -> dict:
    """The step and group each picture shows: an evaluation step whose kept train groups mix passes
    and failures most (the middle one of a tie), one such group there, and the first and last evaluations."""
    from workbench.runs.view import RunView

    df = RunView.open(run).samples()
    train, val = df[df["kind"] == "train"], df[df["kind"] == "val"]
    evals = sorted({int(s) for s in val["step"]})
    mixed = train.groupby(["step", "group"])["passed"].agg(lambda p: 0 < p.sum() < len(p))
    mixed = mixed[mixed].reset_index()
    if len(evals) < 2 or mixed.empty:
        raise SystemExit(f"{run}: the run kept no mixed train group or fewer than 2 evaluations: run more steps (--steps)")
    at_eval = mixed[mixed["step"].isin(evals)]
    rows = at_eval if not at_eval.empty else mixed
    counts = rows["step"].value_counts().sort_index()
    most = [int(k) for k, v in counts.items() if v == counts.max()]
    step = most[len(most) // 2]  # of the steps tied for the most mixed groups, the middle one: the run under way
    group = int(rows[rows["step"] == step]["group"].iloc[0])
    return {"step": step, "group": group, "eval_a": evals[0], "eval_b": evals[-1]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """JupyterLab on 127.0.0.1 serving a temporary folder, with the workbench kernel; a context manager."""

    def __init__(self, root: Path):
        self.root, self.proc, self.base, self.token = root, None, "", uuid.uuid4().hex

    def __enter__(self) -> "Lab":
        from workbench.kernel import install

        tmp = self.root / "jupyter"
        (self.root / "lab").mkdir(parents=True)
        prefix = tmp / "kernel"
        install(prefix=str(prefix))
        env = {**os.environ, "JUPYTER_PATH": str(prefix / "share" / "jupyter"), "JUPYTER_CONFIG_DIR": str(tmp / "cfg"),
               "JUPYTER_RUNTIME_DIR": str(tmp / "rt"), "JUPYTERLAB_SETTINGS_DIR": str(tmp / "settings"),
               "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "ws")}  # fmt: skip
        port = free_port()
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={self.root / 'lab'}",
               "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--ServerApp.open_browser=False",
               "--LabApp.extension_manager=readonly"]  # fmt: skip
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-root")
        self.log = open(self.root / "jupyter.log", "w")
        self.proc = subprocess.Popen(cmd, cwd=self.root / "lab", env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        self.base = f"http://127.0.0.1:{port}"
        for _ in range(240):
            if self.proc.poll() is not None:
                raise SystemExit(f"jupyter lab exited: {(self.root / 'jupyter.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={self.token}", timeout=2) as r:
                    json.loads(r.read())
                return self
            except OSError:
                time.sleep(0.5)
        raise SystemExit("jupyter lab did not answer within 120 s")

    def __exit__(self, *exc) -> None:
        self.proc.send_signal(signal.SIGINT)  # twice: Jupyter asks for confirmation on the first
        time.sleep(0.5)
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # our own process group only (start_new_session)
            self.proc.wait()
        self.log.close()

    def notebook(self, name: str, cells: list[str]) -> str:
        """Write a notebook of these code cells; its URL in a workspace of its own."""
        import nbformat

        nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "workbench", "display_name": "workbench",
                                                               "language": "python"}})  # fmt: skip
        nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
        nbformat.write(nb, self.root / "lab" / f"{name}.ipynb")
        return f"{self.base}/lab/workspaces/{name}/tree/{name}.ipynb?reset&token={self.token}"


def run_cell(page, code: str, wait_ms: int = 1500) -> None:
    """Run `code` in the open notebook's kernel (its session), as a cell the user would run, and let the widgets redraw."""
    page.evaluate("""async (code) => {
        const w = window.jupyterapp.shell.currentWidget;
        const f = w.sessionContext.session.kernel.requestExecute({code, store_history: false});
        const reply = await f.done;
        if (reply.content.status !== 'ok') throw new Error(reply.content.evalue || 'cell failed');
    }""", code)  # fmt: skip
    page.wait_for_timeout(wait_ms)


def shot(page, locator, path: Path) -> None:
    """A picture of `locator`'s element from its top, at most MAX_HEIGHT pixels of it."""
    locator.evaluate("el => el.scrollIntoView({block: 'start'})")
    page.wait_for_timeout(300)
    box = locator.bounding_box()
    height = min(box["height"], MAX_HEIGHT, VIEWPORT["height"] - max(0.0, box["y"]))
    page.screenshot(path=str(path), clip={"x": box["x"], "y": max(0.0, box["y"]), "width": box["width"], "height": height})


def open_dashboard(page, url: str, chart: bool = True) -> None:
    """Open the notebook, run its one cell (the dashboard), wait for the dashboard to draw (its
    chart too, unless `chart` is False: a run with no evaluation has none, a message in its place)."""
    page.goto(url)
    page.wait_for_function("() => window.jupyterapp && document.querySelector('.jp-Notebook')", timeout=120_000)
    page.wait_for_function(
        "() => { const w = window.jupyterapp.shell.currentWidget;"
        " return w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
        " && w.sessionContext.session.kernel.status === 'idle'; }", timeout=120_000)  # fmt: skip
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.locator(".workbench-dashboard").wait_for(timeout=180_000)
    if chart:
        page.wait_for_selector(".workbench-dashboard .wb-chart svg", timeout=180_000)
    else:  # the Samples tab drawn, hidden behind the Curve tab
        page.wait_for_selector(".workbench-dashboard .workbench-samples", state="attached", timeout=180_000)
    page.add_style_tag(content=".Toastify { display: none !important; }")  # JupyterLab's news toast, out of the pictures
    page.wait_for_timeout(1000)


def smollm2_pictures(lab: Lab, browser, run: Path, pick: dict, out: Path) -> None:
    cells = ["from workbench.runs.view import RunView\nfrom workbench.widgets.dashboard import Dashboard\n"
             f"d = Dashboard(RunView.open({str(run)!r}))\nd"]  # fmt: skip
    page = browser.new_page(viewport=VIEWPORT)
    open_dashboard(page, lab.notebook("smollm2", cells))
    dash = page.locator(".workbench-dashboard")
    page.wait_for_function("() => document.querySelector('.workbench-dashboard').innerText.includes('finished')", timeout=60_000)
    shot(page, dash, out / "dashboard-curve.png")
    s = pick["step"]
    run_cell(page, f"d.open_samples({s}, 'train')\nd.samples.verdict.value = 'failed'")
    page.wait_for_selector(f".workbench-samples tr.wb-sample[data-step='{s}']", timeout=30_000)
    shot(page, dash, out / "dashboard-samples.png")
    run_cell(page, "from workbench.widgets.samples_view import MODES\nd.samples.verdict.value = 'all'\n"
                   f"d.samples.kind.value = 'train'\nd.samples.mode.value = MODES[1]\n"
                   f"d.samples.group.value = ({s}, 'train', {pick['group']})")  # fmt: skip
    page.locator(".workbench-samples .wb-group").wait_for(timeout=30_000)
    shot(page, dash, out / "dashboard-group.png")
    run_cell(page, f"d.samples.steps.value = (d.samples.steps.min, d.samples.steps.max)\nd.samples.kind.value = 'all'\n"
                   f"d.samples.mode.value = MODES[2]\nd.samples.eval_a.value = {pick['eval_a']}\n"
                   f"d.samples.eval_b.value = {pick['eval_b']}")  # fmt: skip
    page.wait_for_selector(".workbench-samples .wb-pair", timeout=30_000)
    shot(page, dash, out / "dashboard-side-by-side.png")
    page.close()


def health_picture(lab: Lab, browser, run: Path, out: Path) -> None:
    cells = ["from workbench.runs.view import RunView\nfrom workbench.widgets.dashboard import Dashboard\n"
             f"Dashboard(RunView.open({str(run)!r}))"]  # fmt: skip
    page = browser.new_page(viewport=VIEWPORT)
    open_dashboard(page, lab.notebook("health", cells))
    banner = page.locator(".workbench-health")
    banner.wait_for(timeout=60_000)
    shot(page, banner, out / "dashboard-health.png")
    print("  banner:", " | ".join(banner.inner_text().splitlines()), flush=True)
    page.close()


def _turns(r) -> list[dict]:
    try:
        turns = json.loads(r["turns"]) if isinstance(r.get("turns"), str) and r["turns"] else []
    except ValueError:
        return []
    return turns if isinstance(turns, list) else []


def _shows_turns(turns: list[dict]) -> bool:
    """A tool call answered by its result (an assistant `<tool_call>` turn, then a turn not the
    assistant's), and a last assistant turn that calls nothing (its final words)."""
    called = any(a.get("role") == "assistant" and "<tool_call>" in str(a.get("text", "")) and b.get("role") != "assistant"
                 for a, b in zip(turns, turns[1:]))  # fmt: skip
    last = turns[-1] if turns else {}
    return called and last.get("role") == "assistant" and "<tool_call>" not in str(last.get("text", ""))


def pick_episode(run: Path, step: int | None = None) -> dict:
    """The episode dashboard-conversation.png shows, and the search that narrows the table to it
    (see the module's docstring)."""
    from workbench.runs.view import RunView
    from workbench.widgets.samples_data import SampleQuery, filter_samples

    df = RunView.open(run).samples()
    if df.empty or "turns" not in df.columns:
        raise SystemExit(f"{run}: no kept samples with turns (an environment's run keeps them in samples/)")
    train = df[(df["kind"] == "train") & df["passed"].astype(bool)]
    if step is not None:
        train = train[train["step"] == step]
    ok = train[[_shows_turns(_turns(r)) for _, r in train.iterrows()]]
    if ok.empty:
        raise SystemExit(f"{run}: no passing train episode{f' at step {step}' if step is not None else ''} "
                         "with a tool call, its result and a final answer")  # fmt: skip
    passes = df[df["kind"] == "train"].groupby(["step", "group"])["passed"].sum()
    alone = ok[[int(passes[(r["step"], r["group"])]) == 1 for _, r in ok.iterrows()]]
    rows = (alone if not alone.empty else ok).sort_values(["step", "group"], ascending=[False, True], kind="stable")
    r = rows.iloc[0]
    s = int(r["step"])
    lines = [ln.strip() for ln in str(r["prompt"]).splitlines()]
    lines = [ln for ln in (SPECIAL.sub("", ln).strip() for ln in lines) if len(ln.split()) >= 3]
    question = lines[-1] if lines else ""
    first = question.split(". ")[0] + "." if ". " in question else question
    call = next(str(t.get("text", "")) for t in _turns(r) if "<tool_call>" in str(t.get("text", "")))
    call = next((ln.strip() for ln in call.splitlines() if ln.strip() and "tool_call>" not in ln), call)
    text = ""
    for cand in (first, question, call):
        if cand and len(filter_samples(df, SampleQuery(steps=(s, s), passed=True, text=cand, kind="train"))) == 1:
            text = cand
            break
    return {"step": s, "group": int(r["group"]), "prompt_id": int(r["prompt_id"]), "text": text, "question": question,
            "alone": not alone.empty, "turns": len(_turns(r))}  # fmt: skip


def conversation_picture(lab: Lab, browser, run: Path, pick: dict, out: Path) -> None:
    """The Samples tab's table narrowed to one episode, its folded conversation opened."""
    cells = ["from workbench.runs.view import RunView\nfrom workbench.widgets.dashboard import Dashboard\n"
             f"d = Dashboard(RunView.open({str(run)!r}))\nd"]  # fmt: skip
    page = browser.new_page(viewport=VIEWPORT)
    open_dashboard(page, lab.notebook("conversation", cells), chart=False)
    dash = page.locator(".workbench-dashboard")
    s = pick["step"]
    run_cell(page, f"d.open_samples({s}, 'train')\nd.samples.verdict.value = 'passed'\nd.samples.text.value = {pick['text']!r}")
    rows = page.locator(f".workbench-samples tr.wb-sample[data-step='{s}'][data-passed='true']")
    rows.first.wait_for(timeout=30_000)
    if rows.count() != 1:
        print(f"  note: the table shows {rows.count()} episodes, not 1", flush=True)
    folded = rows.first.locator("td:nth-child(4) details.wb-fold > summary")
    if folded.count():
        folded.first.click()  # the conversation is longer than a fold: open it, as a user would
        page.wait_for_timeout(500)
    text = rows.first.locator("td:nth-child(4)").inner_text()
    if "── assistant ──" not in text or "<tool_call>" not in text:
        raise SystemExit(f"the table's row does not show the episode's turns: {text[:300]!r}")
    shot(page, dash, out / "dashboard-conversation.png")
    page.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30, help="trainer steps of the SmolLM2 run (default 30)")
    ap.add_argument("--run", type=Path, default=REPO / "runs" / "docs-smollm2", help="the SmolLM2 run's folder")
    ap.add_argument("--health-run", type=Path, default=REPO / "runs" / "docs-lr100x", help="the flagged run's folder")
    ap.add_argument("--out", type=Path, default=REPO / "docs", help="where the pictures go (default docs/)")
    ap.add_argument("--rerun", action="store_true", help="make both runs again even when finished ones are there")
    ap.add_argument("--env-run", type=Path, help="an environment's run folder (bench_env_learning.py) for "
                    "dashboard-conversation.png; alone, only that picture is taken")  # fmt: skip
    ap.add_argument("--env-step", type=int, help="the step of --env-run's episode (default: the latest that shows one)")
    ap.add_argument("--all", action="store_true", help="with --env-run, take the other pictures too")
    a = ap.parse_args()
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"{CHROMIUM} is missing: install Debian's chromium (`make browser` or `apt-get install -y chromium`)")
    env = None
    if a.env_run is not None:
        env_run = a.env_run.resolve()
        env = pick_episode(env_run, a.env_step)
        print(f"conversation picture: {env_run.name}, step {env['step']}, group {env['group']} (prompt {env['prompt_id']}), "
              f"a passing episode of {env['turns']} turns{', the only pass of its group' if env['alone'] else ''}; "
              f"search {env['text']!r}", flush=True)  # fmt: skip
    if env is not None and not a.all:
        take_pictures(a.out, lambda lab, browser, shots: conversation_picture(lab, browser, env_run, env, shots))
        return
    run = ensure_run(a.run.resolve(), ["--config", "configs/smollm2.yaml", "--set", f"train.max_steps={a.steps}"], a.rerun)
    flagged = ensure_run(a.health_run.resolve(), ["--config", "configs/quickstart.yaml", "--set", "train.lr=2e-2",
                                                  "--set", "train.max_steps=60", "--set", "eval.every_steps=20"], a.rerun)  # fmt: skip
    if not json.loads((flagged / "summary.json").read_text()).get("health"):
        raise SystemExit(f"{flagged} raised no health flag: the banner has nothing to show")
    pick = pick_steps(run)
    print(f"SmolLM2 pictures: failures at step {pick['step']}, group {pick['group']}; "
          f"evaluations {pick['eval_a']} and {pick['eval_b']} side by side", flush=True)

    def all_pictures(lab: Lab, browser, shots: Path) -> None:
        smollm2_pictures(lab, browser, run, pick, shots)
        health_picture(lab, browser, flagged, shots)
        if env is not None:
            conversation_picture(lab, browser, env_run, env, shots)

    take_pictures(a.out, all_pictures)


def take_pictures(out: Path, take) -> None:
    """`take(lab, browser, shots)` in a JupyterLab and Chromium of their own; the pictures it wrote
    into `shots` then replace the manual's (only when all were taken)."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="docs-shots-") as tmp, Lab(Path(tmp)) as lab, sync_playwright() as p:
        shots = Path(tmp) / "shots"
        shots.mkdir()
        browser = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        try:
            take(lab, browser, shots)
        finally:
            browser.close()
        for f in sorted(shots.glob("*.png")):  # all taken: only then replace the manual's pictures
            shutil.copy(f, out / f.name)
            print(f"wrote {out / f.name} ({f.stat().st_size:,} bytes)", flush=True)


if __name__ == "__main__":
    main()
