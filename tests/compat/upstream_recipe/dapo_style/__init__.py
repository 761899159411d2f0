"""A recipe in the shape of verl's DAPO: its own trainer ``fit()`` and its own task runner ``run()``."""
