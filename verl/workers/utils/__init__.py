"""Batch layout conversions and loss functions of verl's model-engine API (``verl.workers.engine``)."""
