"""Watching a run: per-step metrics (metrics.py), alarms on them (alarms.py), TensorBoard and W&B mirrors
(loggers.py), and the report a person opens: its plots (plots.py) and its page (page.py)."""
