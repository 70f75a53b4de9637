"""workbench.tasks: verifiable tasks (prompts, answers, a checker), loaded by `load_task`.

    types      Example, TaskData, Checker, exact_checker: what the task families build
    synthetic  the built-in seeded families (addition, ...); files: JSONL / Parquet tasks + the math checker
    countdown, word_problems  synthetic families for chat models (countdown's verifier parses with ast)
    chat       conversational prompts, task.system_prompt, the TRL-shaped inputs of reward functions
    base       load_task (dispatch by name, above the families), get_checker, safe_check, CheckerError,
               check_batch / submit_checks (verdicts in batches: by domain, code through a sandbox)
    mixture    task.mix: several sources in one task, each example tagged with its domain
    codegen    `pyexpr`, a code family the builtin model learns on a CPU (checked in the sandbox)
    code       code JSONL tasks (function calls, stdin/stdout, HumanEval asserts) and HumanEval itself
    sandbox    bubblewrap fork-server workers that run model-written code: LocalSandbox, require_sandbox
    check      `workbench check`: score saved completions against a config's task, no Ray
"""
