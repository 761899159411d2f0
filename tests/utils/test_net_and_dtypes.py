"""verl.utils.net_utils (address families, free ports) and verl.utils.torch_dtypes (precision spellings)."""

from __future__ import annotations

import socket

import pytest
import torch

from verl.utils import net_utils
from verl.utils.torch_dtypes import PrecisionType


def test_address_families():
    assert net_utils.is_ipv4("10.0.0.1") and not net_utils.is_ipv4("::1")
    assert net_utils.is_ipv6("::1") and net_utils.is_valid_ipv6_address("fe80::1")
    assert not net_utils.is_ipv6("10.0.0.1") and not net_utils.is_valid_ipv6_address("localhost")


def test_free_port_closed_or_held():
    port, sock = net_utils.get_free_port("127.0.0.1")
    assert sock is None and 0 < port < 65536
    with socket.socket() as probe:  # closed: the caller can bind it
        probe.bind(("127.0.0.1", port))
    held, sock = net_utils.get_free_port("127.0.0.1", with_alive_sock=True)
    try:
        assert sock.getsockname()[1] == held
    finally:
        sock.close()
    with pytest.raises(OSError, match="'203.0.113.255'"):
        net_utils.get_free_port("203.0.113.255")  # not an address of this machine


@pytest.mark.parametrize(
    ("spelling", "dtype"),
    [
        (16, torch.float16),
        ("fp16", torch.float16),
        ("32", torch.float32),
        (torch.float32, torch.float32),
        ("bf16", torch.bfloat16),
        ("bfloat16", torch.bfloat16),
    ],
)
def test_precision_spellings(spelling, dtype):
    assert PrecisionType.to_dtype(spelling) is dtype
    assert PrecisionType.is_fp16(spelling) == (dtype is torch.float16)
    assert PrecisionType.is_bf16(spelling) == (dtype is torch.bfloat16)
    assert PrecisionType.is_fp32(spelling) == (dtype is torch.float32)


def test_precision_names_and_errors():
    assert PrecisionType.to_str(torch.bfloat16) == "bf16"
    assert PrecisionType.supported_type(16) and PrecisionType.supported_type("bf16")
    assert not PrecisionType.supported_type("fp8")
    assert "mixed" in PrecisionType.supported_types()
    with pytest.raises(RuntimeError, match="'fp8'"):
        PrecisionType.to_dtype("fp8")
    with pytest.raises(RuntimeError, match="float64"):
        PrecisionType.to_str(torch.float64)
