"""A recipe that brings its own algorithm, the way verl's public recipes do: a policy loss and an advantage estimator
registered by name with verl's decorators (``algos.py``) and picked on verl's command line
(tests/compat/test_custom_algo_recipe.py runs it)."""
