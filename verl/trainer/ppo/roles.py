"""Role: which part of the PPO dataflow a worker group plays; keys of role_worker_mapping and pool mappings."""

from __future__ import annotations

from enum import Enum


class Role(Enum):
    Actor = 0
    Rollout = 1
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4
    RewardModel = 5
    ActorRolloutRef = 6
    Env = 7
    TeacherModel = 8

    def __str__(self) -> str:
        return _ROLE_STRINGS[self]

    @classmethod
    def from_string(cls, name: str) -> Role:
        """Parse "actor_rollout", "ActorRollout" or "ref" style names."""
        key = str(name).strip()
        for role in cls:
            if key in (role.name, _ROLE_STRINGS[role]) or key.lower() == role.name.lower():
                return role
        raise ValueError(f"unknown role {name!r}; known: {[str(r) for r in cls]}")


_ROLE_STRINGS = {
    Role.Actor: "actor",
    Role.Rollout: "rollout",
    Role.ActorRollout: "actor_rollout",
    Role.Critic: "critic",
    Role.RefPolicy: "ref",
    Role.RewardModel: "rm",
    Role.ActorRolloutRef: "actor_rollout_ref",
    Role.Env: "env",
    Role.TeacherModel: "teacher",
}
