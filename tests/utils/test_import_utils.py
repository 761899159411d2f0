"""verl.utils.import_utils: verl's loaders (pkg:// and file paths, fully qualified names), deprecation and
package-availability checks."""

from __future__ import annotations

import sys
import warnings

import pytest

from verl.utils import import_utils


def test_pkg_paths_with_dots_or_slashes_import_installed_modules():
    import verl.utils.padding as padding

    assert import_utils.load_module("pkg://verl.utils.padding") is padding
    assert import_utils.load_module("pkg://verl/utils/padding") is padding
    assert import_utils.load_extern_object("pkg://verl.utils.padding", "pad_input") is padding.pad_input
    assert import_utils.load_module("") is None
    with pytest.raises(ModuleNotFoundError, match="verl.utils.no_such_module"):
        import_utils.load_module("pkg://verl.utils.no_such_module")


def test_file_modules_can_be_registered_under_a_name(tmp_path):
    source = tmp_path / "custom_thing.py"
    source.write_text("VALUE = 41\n")
    name = "verl_test_custom_thing_module"
    try:
        module = import_utils.load_module(f"file://{source}", module_name=name)
        assert module.VALUE == 41 and sys.modules[name] is module
        other = tmp_path / "other.py"
        other.write_text("VALUE = 1\n")
        with pytest.raises(RuntimeError, match="sys.modules already holds a different module under that name"):
            import_utils.load_module(str(other), module_name=name)
    finally:
        sys.modules.pop(name, None)
    with pytest.raises(FileNotFoundError, match="missing.py"):
        import_utils.load_module(str(tmp_path / "missing.py"))


def test_load_class_from_fqn_and_its_errors():
    from verl.utils.torch_dtypes import PrecisionType

    assert import_utils.load_class_from_fqn("verl.utils.torch_dtypes.PrecisionType") is PrecisionType
    with pytest.raises(ValueError, match="fully qualified name"):
        import_utils.load_class_from_fqn("PrecisionType", "dtype class")
    with pytest.raises(ImportError, match="verl.no_such"):
        import_utils.load_class_from_fqn("verl.no_such.Thing")
    with pytest.raises(AttributeError, match="'Nope' not found in module 'verl.utils.torch_dtypes'"):
        import_utils.load_class_from_fqn("verl.utils.torch_dtypes.Nope")


def test_deprecated_functions_and_classes_warn_with_the_replacement():
    @import_utils.deprecated("new_function")
    def old_function(x):
        return x + 1

    @import_utils.deprecated()
    class OldClass:
        def __init__(self, value):
            self.value = value

    with pytest.warns(FutureWarning, match="old_function.*use 'new_function'"):
        assert old_function(1) == 2
    with pytest.warns(FutureWarning, match="OldClass' is deprecated"):
        assert OldClass(3).value == 3
    assert old_function.__name__ == "old_function"


def test_load_extern_type_is_a_deprecated_alias(tmp_path):
    source = tmp_path / "types_here.py"
    source.write_text("class Thing:\n    pass\n")
    with pytest.warns(FutureWarning, match="load_extern_object"):
        thing = import_utils.load_extern_type(str(source), "Thing")
    assert thing.__name__ == "Thing"


def test_import_external_libs_and_availability_checks():
    import_utils.import_external_libs(None)
    import_utils.import_external_libs("json")
    import_utils.import_external_libs(["json", "verl.utils.padding"])
    with pytest.raises(ImportError, match="'no_such_lib_xyz' cannot be imported"):
        import_utils.import_external_libs(["no_such_lib_xyz"])
    for check in (
        import_utils.is_megatron_core_available,
        import_utils.is_vllm_available,
        import_utils.is_sglang_available,
        import_utils.is_nvtx_available,
        import_utils.is_trl_available,
        import_utils.is_msprobe_available,
    ):
        assert isinstance(check(), bool)
    assert import_utils.is_msprobe_available() is False


def test_resolve_config_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "loop.yaml").write_text("x: 1\n")
    assert import_utils.resolve_config_path("loop.yaml") == str(tmp_path / "loop.yaml")
    assert import_utils.resolve_config_path("/abs/anything.yaml") == "/abs/anything.yaml"
    found = import_utils.resolve_config_path("verl/trainer/config/ppo_trainer.yaml")  # next to the package
    assert found.endswith("verl/trainer/config/ppo_trainer.yaml")
    with pytest.raises(FileNotFoundError, match="nowhere.yaml"):
        import_utils.resolve_config_path("nowhere.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        import_utils.resolve_config_path("loop.yaml")


def test_objects_of_a_file_module_pickle_by_value_for_other_processes(tmp_path):
    """A Ray worker never loaded the file (it may not exist on its node): a class or function from it must
    travel by value, not as a reference to the private module name."""
    import subprocess
    import sys

    from ray import cloudpickle

    from verl.utils.import_utils import load_extern_object

    source = tmp_path / "my_loops.py"
    source.write_text("class Loop:\n    kind = 'from a file'\n\ndef score(x):\n    return x + 1\n")
    payload = cloudpickle.dumps((load_extern_object(str(source), "Loop"), load_extern_object(str(source), "score")))
    source.unlink()  # the other process cannot read it either
    check = "import pickle, sys; cls, fn = pickle.loads(sys.stdin.buffer.read()); print(cls.kind, fn(1))"
    out = subprocess.run([sys.executable, "-c", check], input=payload, capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert out.stdout.decode().strip() == "from a file 2"


def test_lazy_exports_import_the_defining_module_on_first_access(tmp_path, monkeypatch):
    (tmp_path / "lazy_home.py").write_text(
        "from verl.utils.import_utils import lazy_exports\n"
        "__getattr__ = lazy_exports(__name__, {'heavy_value': 'lazy_heavy'})\n"
    )
    (tmp_path / "lazy_heavy.py").write_text("heavy_value = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import lazy_home

    assert "lazy_heavy" not in sys.modules
    from lazy_home import heavy_value

    assert heavy_value == 42 and "lazy_heavy" in sys.modules
    with pytest.raises(AttributeError, match="module 'lazy_home' has no attribute 'other'"):
        lazy_home.other  # noqa: B018
