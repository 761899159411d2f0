"""BaseConfig's item access as verl defines it: attributes set after construction are readable, a missing key
is both a KeyError (Mapping idioms) and an AttributeError (verl's contract), a non-string key a TypeError."""

import pytest

from verl.base_config import BaseConfig, MissingConfigKey
from verl.workers.config import OptimizerConfig


def test_item_access_follows_verls_contract():
    cfg = BaseConfig()
    cfg.extra = "value"
    assert cfg["extra"] == "value"
    assert "extra" not in list(cfg)  # the Mapping view still lists fields only
    for error in (KeyError, AttributeError):
        with pytest.raises(error, match="BaseConfig has no field 'missing'"):
            cfg["missing"]
    with pytest.raises(TypeError, match="keys are field names"):
        cfg[3]
    assert OptimizerConfig().get("missing", 5) == 5
    with pytest.raises(MissingConfigKey):
        cfg["_target_"]  # private names stay hidden
