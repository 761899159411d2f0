"""verl: Ray-native reinforcement-learning post-training for language models."""

from importlib.metadata import PackageNotFoundError, version

from verl.protocol import DataProto

try:
    __version__ = version("verl")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0.dev0"

__all__ = ["DataProto", "__version__"]
