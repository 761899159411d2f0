"""Old home (verl 0.6-0.7) of :mod:`verl.workers.utils`: padding conversions and engine loss functions."""
