"""workbench.commands: the sub-commands that stand on several rooms at once (the doors' layer, above
runs/, tracking/, tasks/ and config): `compare` (MLflow runs side by side, their fits), `ui` (the
MLflow UI on 127.0.0.1), `check` (score saved completions against a task) and `predict` (an unseen
configuration's curve from smaller runs). `workbench.cli`
registers them; nothing below imports them.
"""
