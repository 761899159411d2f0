"""verl's ``verl.workers.rollout.sglang_rollout`` package: SGLang-side helpers that need no SGLang import.

The SGLang engine itself is :mod:`verl.workers.rollout.sglang` (``rollout.name=sglang``, ``pip install verl[sglang]``).
"""
