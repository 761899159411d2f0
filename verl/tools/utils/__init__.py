"""verl's ``verl.tools.utils`` package (0.4-0.7): tool helpers under their older paths."""
