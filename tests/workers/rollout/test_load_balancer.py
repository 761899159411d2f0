"""GlobalRequestLoadBalancer: sticky sessions, least-in-flight choice, deterministic routing, pool changes."""

from __future__ import annotations

import pytest

from verl.workers.rollout.router import GlobalRequestLoadBalancer


def test_new_requests_go_to_the_least_loaded_server_and_turns_stick():
    lb = GlobalRequestLoadBalancer({"a": "A", "b": "B"})
    assert lb.acquire_server("r1") == ("a", "A")
    assert lb.acquire_server("r2") == ("b", "B")  # a has one in flight
    assert lb.acquire_server("r1") == ("a", "A")  # sticky although a is busier
    assert lb.get_inflight_count("a") == 2 and lb.get_total_inflight() == 3
    lb.release_server("a")
    lb.release_server("a")
    lb.release_server("a")  # never below zero
    assert lb.get_inflight_count("a") == 0
    # ties broken by how many requests a server has been given: b got fewer
    lb.release_server("b")
    assert lb.acquire_server("r3")[0] == "b"


def test_removed_servers_drop_their_sticky_sessions_and_new_ones_join():
    lb = GlobalRequestLoadBalancer({"a": 1, "b": 2})
    assert lb.acquire_server("x")[0] == "a"
    lb.remove_servers(["a"])
    assert lb.get_all_servers() == ["b"]
    assert lb.acquire_server("x")[0] == "b"
    lb.add_servers({"c": 3})
    assert lb.acquire_server("y")[0] == "c"
    status = lb.get_status()
    assert status["active_servers"] == 2 and status["total_inflight"] == 2
    assert lb.clear_sticky_cache()["cleared_entries"] == 2
    lb.remove_servers(["b", "c"])
    with pytest.raises(RuntimeError, match="request z"):
        lb.acquire_server("z")


def test_full_determinism_routes_by_request_id_only():
    servers = {f"s{i}": i for i in range(4)}
    first = [GlobalRequestLoadBalancer(servers, full_determinism=True).acquire_server(f"q{i}")[0] for i in range(8)]
    lb = GlobalRequestLoadBalancer(servers, full_determinism=True)
    for i in range(8):  # arrival order and load do not matter
        lb.acquire_server(f"busy{i}")
    assert [lb.acquire_server(f"q{i}")[0] for i in range(8)] == first


def test_sticky_cache_is_bounded():
    lb = GlobalRequestLoadBalancer({"a": 1, "b": 2}, max_cache_size=2)
    lb.acquire_server("r1")  # -> a
    lb.acquire_server("r2")  # -> b
    lb.acquire_server("r3")  # evicts r1
    lb.release_server("a")
    lb.release_server("a")
    assert lb.get_status()["servers"] == {"a": 0, "b": 1}
    assert lb.acquire_server("r1")[0] == "a"  # r1 forgotten: routed afresh to the idle server
    assert lb.require_acquire_fields() == [] and lb.require_release_fields() == []
    with pytest.raises(ValueError, match="max_cache_size"):
        GlobalRequestLoadBalancer({}, max_cache_size=0)
