"""A recipe that places its own reward worker on a resource pool of its own, through verl's task-runner steps."""
