"""Is the run learning? An early warning that says why when it is not, and the rule that stops it.

    watch = LearningWatch(cfg, task)
    watch.saw(chunk.packed)                        # each generated chunk: pass counts, a few samples
    watch.after_step(step, stats, log, stop)       # each trained step: warnings (events.log, status,
                                                   # MLflow tag), and stop.set() when the option says so
    watch.warning                                  # the latest warning (status, dashboard)
    watch.summary(counters)                        # summary.json's "learning" and "training"

Three signs, each told once per run (the coordinator calls the two hooks, nothing else):

- *no pass*: after `train.learning_check_steps` steps no sampled completion has passed the checker;
- *all dropped*: every group of a step was dropped (zero reward variance: each prompt's completions
  all passed or all failed), so that step trained nothing;
- *low trained share*: over the last `train.learning_check_steps` steps, less than
  `train.min_trained_share` of the sampled completions were trained on.

A warning gives the pass count, the checker's name and up to three sampled completions beside their
expected answers (decoded here with the generators' tokenizer: preflight.policy_tokenizer), plus a
hint when most completions ran into generation.max_new_tokens. With `train.stop_if_not_learning` a
*no pass* or *low trained share* warning stops the run after the step in flight (status "stopped",
summary.json's learning.stopped_because). A run that trained no sample ends with summary.json's
"training": "nothing was trained: ...", which `workbench run` prints as its last line.
"""

from __future__ import annotations

import collections
import threading
from typing import Any, Callable, Optional

import numpy as np

SAMPLES_SHOWN = 3  # sampled completions a warning shows beside their expected answers
SHOWN_CHARS = 80  # of each completion and answer


class LearningWatch:
    """The not-learning detector of one run; see the module docstring."""

    def __init__(self, cfg: Any, task: Any, decode: Optional[Callable[[list[int]], str]] = None):
        self.cfg, self.task = cfg, task
        self.window = cfg.train.learning_check_steps
        self.checker = getattr(task, "checker_name", "") or "the task's checker"
        self._decode = decode
        self.sampled = self.passed = 0  # completions generated / passed, since this process started
        self.samples: collections.deque = collections.deque(maxlen=SAMPLES_SHOWN)  # (prompt id, tokens, passed)
        self.steps: collections.deque = collections.deque(maxlen=self.window)  # (trained, in batch, truncation)
        self.told: dict[str, str] = {}  # kind -> warning
        self.warning: Optional[str] = None
        self.stopped_because: Optional[str] = None

    # -- the two hooks ---------------------------------------------------------------------
    def saw(self, packed: Any) -> None:
        """A generated chunk (PackedGroups): count its passes, keep the first completion of its
        last groups as samples (a passing one preferred once there is one)."""
        self.sampled += int(packed.num_sequences)
        self.passed += int(packed.correct.sum())
        seq_off = np.concatenate([[0], np.cumsum(packed.size)]).astype(np.int64)
        tok_off = np.concatenate([[0], np.cumsum(packed.t_len)]).astype(np.int64)
        for g in range(max(0, len(packed) - SAMPLES_SHOWN), len(packed)):
            if packed.size[g] == 0:
                continue
            i = int(seq_off[g])
            self.samples.append((int(packed.prompt_id[g]), packed.tokens[tok_off[i] : tok_off[i + 1]].tolist(), bool(packed.correct[i])))

    def after_step(self, step: int, stats: dict[str, Any], log: Any, stop: threading.Event) -> None:
        """Judge the run after trained step `step` (the trainer's `stats`); tell what is new."""
        in_batch = float(stats.get("train/groups", 0.0)) * self.cfg.train.generations_per_prompt
        trained = float(stats.get("train/sequences_trained", 0.0))
        self.steps.append((trained, in_batch, float(stats.get("train/truncation_rate", 0.0) or 0.0)))
        news = []
        if in_batch and not trained and stats.get("train/zero_variance_frac", 0.0) >= 1.0 and "dropped" not in self.told:
            news.append(("dropped", f"every group of step {step} was dropped by the zero-variance filter (each prompt's "
                                    "completions all passed or all failed), so nothing was trained at that step"))
        if len(self.steps) == self.window and "no pass" not in self.told and self.sampled and not self.passed:
            news.append(("no pass", f"no completion has passed the checker in {step} steps"))
        batch = sum(n for _, n, _ in self.steps)
        share = sum(t for t, _, _ in self.steps) / batch if batch else 1.0
        no_pass_said = "no pass" in self.told or any(k == "no pass" for k, _ in news)  # then a share of 0 says nothing new
        if len(self.steps) == self.window and share < self.cfg.train.min_trained_share and "low share" not in self.told and not no_pass_said:
            news.append(("low share", f"only {share:.1%} of the sampled completions of steps {step - self.window + 1}-{step} "
                                      f"were trained on (train.min_trained_share = {self.cfg.train.min_trained_share:g})"))
        for kind, what in news:
            self.warning = self.told[kind] = f"not learning: {what}; {self._evidence()}"
            log.event(self.warning)
            log.tag("workbench.not_learning", self.warning)
            if kind != "dropped" and self.cfg.train.stop_if_not_learning and self.stopped_because is None:
                self.stopped_because = self.warning
                log.event(f"stopping after step {step}: train.stop_if_not_learning is set")
                stop.set()

    # -- what a warning says ---------------------------------------------------------------
    def _evidence(self) -> str:
        text = f"{self.passed} of {self.sampled} sampled completions passed the checker '{self.checker}' so far"
        trunc = [t for _, _, t in self.steps]
        if trunc and np.mean(trunc) > 0.5 and self.cfg.task.name == "env":  # an episode has three budgets
            e = self.cfg.env
            text += (f"; {np.mean(trunc):.0%} of the episodes were cut by a budget (generation.max_new_tokens = "
                     f"{self.cfg.generation.max_new_tokens} a turn, env.max_turns = {e.max_turns}, env.max_episode_tokens = "
                     f"{e.max_episode_tokens}; `workbench samples` shows where)")  # fmt: skip
        elif trunc and np.mean(trunc) > 0.5:
            text += (f"; {np.mean(trunc):.0%} of them ran into generation.max_new_tokens = "
                     f"{self.cfg.generation.max_new_tokens} before EOS (raise it?)")
        shown = self._shown_samples()
        return text + (f". Samples (completion => expected answer): {shown}" if shown else "")

    def _shown_samples(self) -> str:
        try:
            decode = self._decoder()
            out = []
            for pid, tokens, ok in self.samples:
                answer = self.task.train[pid].answer
                out.append(f"{_clip(decode(tokens))!r} => {_clip(answer)!r}{' (passed)' if ok else ''}")
            return "; ".join(out)
        except Exception as e:  # noqa: BLE001 - the warning matters more than its samples
            return f"(samples unavailable: {type(e).__name__}: {e})"

    def _decoder(self) -> Callable[[list[int]], str]:
        """The generators' decoding: their tokenizer, EOS dropped, special tokens skipped."""
        if self._decode is None:
            from workbench.engine.run.preflight import policy_tokenizer

            tok = policy_tokenizer(self.cfg, self.task)[0]
            eos = tok.eos_token_id

            def decode(tokens: list[int]) -> str:
                return tok.decode(tokens[:-1] if tokens and tokens[-1] == eos else tokens, skip_special_tokens=True)

            self._decode = decode
        return self._decode

    def summary(self, samples_trained: int) -> dict[str, Any]:
        """summary.json's "learning" (counts, warnings, why it stopped) and "training" (one line)."""
        if samples_trained:
            training = f"trained on {samples_trained} sampled completions"
        elif not self.sampled:
            training = "nothing was trained: no completion was generated"
        else:
            why = self.warning or f"{self.passed} of {self.sampled} sampled completions passed the checker '{self.checker}'"
            training = f"nothing was trained: {why.removeprefix('not learning: ')}"
        learning = {"checker": self.checker, "sampled": self.sampled, "passed": self.passed,
                    "warnings": list(self.told.values()), "stopped_because": self.stopped_because}  # fmt: skip
        return {"learning": learning, "training": training}


def _clip(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."
