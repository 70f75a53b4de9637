"""The sandbox for model-written code: bubblewrap fork-server workers, no Ray, no torch.

    require_sandbox()                                   # one UserError line if bwrap cannot run here
    with LocalSandbox(workers=2, limits=Limits(cpu_seconds=2)) as sb:
        verdicts = sb.run([CodeCheck(completion, example.answer)])   # list[Verdict], in order

    bwrap   the worker's bubblewrap command line and the fail-closed probe `require_sandbox`
    server  the fork server that runs inside bwrap (stdlib only): a clean zygote clones one namespaced child per check
    harness assert-style tests: the test in a process of its own, the completion behind a plain-data proxy
    spec    code specs (`code_spec`), completion -> program, and judging outputs in OUR process
    limits  `Limits` (CPU seconds, memory, processes, files, output) and `CodeCheck`
    local   `LocalSandbox`: the workers, pipelined; the engine's Ray pool hosts one per actor
"""

from workbench.tasks.sandbox.bwrap import require_sandbox
from workbench.tasks.sandbox.limits import CodeCheck, Limits
from workbench.tasks.sandbox.local import LocalSandbox
from workbench.tasks.sandbox.spec import SpecError, code_spec

__all__ = ["CodeCheck", "Limits", "LocalSandbox", "SpecError", "code_spec", "require_sandbox"]
