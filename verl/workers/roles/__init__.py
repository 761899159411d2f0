"""verl 0.6-0.7's ``verl.workers.roles`` package; its helpers moved to :mod:`verl.workers.utils`, re-exported here
under the old paths."""
