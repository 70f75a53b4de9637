"""workbench.tasks: verifiable tasks (prompts, answers, a checker), loaded by `load_task`.

    types      Example, TaskData, Checker, exact_checker: what the task families build
    synthetic  the built-in seeded families (addition, ...); files: JSONL / Parquet tasks + the math checker
    base       load_task (dispatch by name, above the families), get_checker, safe_check, CheckerError
"""
