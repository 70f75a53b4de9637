"""workbench.engine.run: one run, driven from the coordinator.

- `coordinator`: the loop and its phases (`RunCoordinator`, `RunFailed`); `prompt_supply`: the prompts each
  chunk gets (`PromptSupply`: sampler, replay, No-Positive-Resampling's warnings); `loop_checkpoint`: the
  loop's checkpoint state, restore and save (`LoopCheckpoint`)
- `weight_sync`: the policy versions and when weights are pushed to the generators (`WeightSync`)
- `metrics`: step rows, events and the summary (`RunLog`, `step_row`, `run_summary`)
- `actors`: spawning the generators, trainer group and evaluator (`spawn_workers`, `Workers`)
- `handle`: the `Coordinator` Ray actor and the driver's `RunHandle`, `attach`
- `feed`: a live run polled into its RunView for `workbench.Session` (`RunFeed`)
- `preflight`: path resolution and fail-fast checks in the driver (lengths against the tokenizer and config.json)
- `learning`: the not-learning watch (warnings, the stop option)
- `launch`: `launch`, `run_to_end`, `wait_with_progress`; `accounting`: compute and time; `run_command`: `workbench run`
"""
