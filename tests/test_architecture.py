"""The package's shape: no import cycles, and the concepts of ``hpo`` layered one way.

Read statically (``ast``), from module-level imports only (``if TYPE_CHECKING:`` blocks left out):
a cycle there fails at import time in some order, and a layer that imports a later one is a
concept leaning on something built on top of it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("hpo", "trial_executor")
# The executor's torch-free contract: the only modules of trial_executor outside a concept package.
EXECUTOR_CONTRACT = ("trial_executor._caches", "trial_executor._heap", "trial_executor._deferred", "trial_executor._precisions", "trial_executor._config", "trial_executor._result", "trial_executor._failures")
# Each layer may import the ones before it, never one after it (a module's layer: its longest match).
LAYERS = [
    *EXECUTOR_CONTRACT,
    "trial_executor.data", "trial_executor.batches", "trial_executor.precision", "trial_executor.model",
    "trial_executor.device", "trial_executor.train", "trial_executor",
    "hpo._errors", "hpo._files", "hpo._process", "hpo._attrs", "hpo._ranking", "hpo.space", "hpo.storage", "hpo.study", "hpo.reporting", "hpo._api", "hpo.cli",
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(node: ast.stmt) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def module_level_imports(path: Path) -> set[str]:
    """Modules of this project imported at module level (``from pkg import name`` counts ``pkg.name`` when it is a module)."""
    found: set[str] = set()
    pending = list(ast.parse(path.read_text()).body)
    while pending:
        node = pending.pop()
        if is_type_checking(node):
            continue
        if isinstance(node, (ast.If, ast.Try)):
            pending += [*node.body, *node.orelse, *getattr(node, "handlers", []), *getattr(node, "finalbody", [])]
        elif isinstance(node, ast.ExceptHandler):
            pending += node.body
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in PACKAGES}


def import_graph() -> dict[str, set[str]]:
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    modules = {module_name(p): p for p in files}
    return {name: module_level_imports(path) & modules.keys() for name, path in modules.items()}


def layer_of(module: str) -> int:
    matches = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return LAYERS.index(max(matches, key=len)) if matches else len(LAYERS)  # hpo/__init__, __main__ and the entry modules sit on top


def test_no_import_cycle() -> None:
    graph = import_graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join([*path[path.index(module):], module]))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_layers_import_only_earlier_layers() -> None:
    wrong = [
        f"{module} imports {imported}"
        for module, imports in sorted(import_graph().items())
        for imported in sorted(imports)
        if layer_of(imported) > layer_of(module) and not imported.startswith(module + ".")
    ]
    assert wrong == []


def test_the_checks_see_a_cycle() -> None:
    # The checks above must be able to fail: the graph they read holds the package's real edges.
    graph = import_graph()
    assert "hpo.space._params" in graph["hpo.space._fixes"]
    assert "hpo.storage._sqlite_lock" in graph["hpo.study._lock"]


def _python_prints(code: str, **env: str) -> str:
    """What ``python -c code`` prints in a fresh interpreter with this checkout on its path; its stderr when it fails."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_reading_a_space_or_a_study_does_not_import_torch() -> None:
    # The read-only commands and the space loader stay clear of torch (seconds to import); the
    # objective and the executor's run are the deferred names of the two __init__ files. So do
    # the run and verdict commands until they train: --help and a bad flag answer in a second.
    # optuna, which they do import, shows the check sees what is imported.
    code = (
        "import sys\n"
        "import hpo, hpo.status, hpo.report, hpo.export, hpo.best, hpo.run, hpo.verdict\n"
        "hpo.load_search_space(hpo.DEFAULT_SPACE)\n"
        "print(sorted(m for m in ('optuna', 'torch', 'transformers') if m in sys.modules))\n"
    )
    assert _python_prints(code) == "['optuna']"


def test_every_public_name_resolves() -> None:
    import hpo
    import trial_executor
    import trial_executor.model

    for package in (hpo, trial_executor, trial_executor.model):
        missing = [name for name in package.__all__ if not hasattr(package, name)]
        assert missing == [], f"{package.__name__}: {missing}"


MAX_FUNCTION_LINES, MAX_FILE_LINES = 60, 400


def test_functions_and_files_stay_readable() -> None:
    too_long = []
    for path in sorted(p for package in (*PACKAGES, "benchmarks") for p in (ROOT / package).rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > MAX_FILE_LINES:
            too_long.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                too_long.append(f"{path.relative_to(ROOT)}: {node.name}() {node.end_lineno - node.lineno + 1} lines")
    assert too_long == []


def test_the_executor_is_concept_packages_around_a_torch_free_contract() -> None:
    top_level = sorted(module_name(p) for p in (ROOT / "trial_executor").glob("*.py") if p.name != "__init__.py")
    assert top_level == sorted(EXECUTOR_CONTRACT)
    packages = sorted(p.parent.name for p in (ROOT / "trial_executor").glob("*/__init__.py"))
    assert [f"trial_executor.{name}" for name in packages] == sorted(layer for layer in LAYERS if layer.count(".") == 1 and layer.startswith("trial_executor.") and not layer.split(".")[1].startswith("_"))
    # Nothing below a concept package: one level of private modules each.
    assert sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "trial_executor").glob("*/*/*.py")) == []


def test_the_executor_contract_and_data_do_not_import_torch() -> None:
    code = "import sys\nimport " + ", ".join([*EXECUTOR_CONTRACT, "trial_executor.data", "trial_executor"]) + "\n"
    code += "print(sorted(m for m in ('numpy', 'torch', 'transformers', 'pydantic') if m in sys.modules))\n"
    assert _python_prints(code) == "['pydantic']"  # pydantic (the config's validation) shows the check sees what is imported


def test_checking_a_model_name_does_not_import_modeling_code() -> None:
    # What a study's driver, a --workers or Ray parent and a bad --model do: check names, train nothing.
    # A preset and a name in no cache import neither torch nor transformers (test_models: a cached hub id does).
    code = (
        "import sys\n"
        "from trial_executor import ModelNotFoundError, check_model_name\n"
        "check_model_name('tiny-bert')\n"
        "try:\n    check_model_name('tiny-bret')\nexcept ModelNotFoundError:\n    pass\n"
        "print(sorted(m for m in ('torch', 'transformers.modeling_utils', 'torch._dynamo') if m in sys.modules))\n"
    )
    assert _python_prints(code, HF_HUB_OFFLINE="1") == "[]"


def test_reading_the_flags_of_hpo_check_and_dashboard_imports_neither_torch_nor_the_dashboard() -> None:
    # `hpo check --help` and a mistyped flag took 5-10 s on 2 cores (the parser listed its models through torch);
    # `hpo dashboard --help` 2-4 s (optuna-dashboard imports scikit-learn). A check or a dashboard that runs still loads them.
    code = (
        "import contextlib, io, sys\n"
        "from hpo.cli import _check, _dashboard\n"
        "calls = [(_check.main, ['--help']), (_check.main, ['--model', 'bert-base']), (_check.main, ['--precision', 'fp8']),\n"
        "         (_dashboard.main, ['--help']), (_dashboard.main, ['--port', 'x'])]\n"
        "for main, flags in calls:\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        "        try:\n            main(flags)\n        except SystemExit as stop:\n            assert stop.code in (0, 2), stop.code\n"
        "print(sorted(m for m in ('torch', 'transformers', 'optuna_dashboard', 'sklearn') if m in sys.modules))\n"
    )
    assert _python_prints(code) == "[]"


def test_checking_the_machine_and_a_trials_knobs_imports_no_transformers_or_dynamo() -> None:
    # What a run's precision check, `hpo check` before it times anything and a refused precision do:
    # resolve the device, ask which precisions it runs, read its metadata, decide a config's knobs.
    # transformers (a config, a tokenizer type) and dynamo (the varlen kernel's module) cost seconds there.
    code = (
        "import sys, torch\n"
        "from trial_executor import TrainConfig, hardware_metadata, precision_support, resolve_device\n"
        "from trial_executor.device import resolve_knobs\n"
        "device = resolve_device('cpu')\n"
        "assert precision_support(device)['fp32'] is None and hardware_metadata(device)['device_type'] == 'cpu'\n"
        "resolve_knobs(TrainConfig(fp_precision='bf16', model='tiny-bert'), device, packed_supported=True, total_params=10**6)\n"
        "print(sorted(m for m in ('torch', 'transformers', 'torch._dynamo', 'tokenizers') if m in sys.modules))\n"
    )
    assert _python_prints(code) == "['torch']"


def test_importing_a_command_module_leaves_the_function_of_its_name() -> None:
    # hpo/verdict.py is `python -m hpo.verdict`; hpo.verdict is also the Python API's function.
    # Imported either way round, and through `python -m hpo verdict`'s dispatch, neither hides the other.
    code = (
        "import importlib, sys, types, hpo.verdict, hpo.__main__\n"
        "from hpo.verdict import main\n"
        "assert isinstance(main, types.FunctionType) and main.__module__ == 'hpo.cli._verdict'\n"
        "assert callable(hpo.verdict) and hpo.verdict.__module__ == 'hpo._api', hpo.verdict\n"
        "importlib.reload(sys.modules['hpo.verdict'])\n"
        "assert hpo.verdict.__module__ == 'hpo._api', hpo.verdict\n"
        "assert hpo.__main__.main(['verdict', '--help']) == 0\n"
        "assert hpo.verdict.__module__ == 'hpo._api', hpo.verdict\n"
    )
    _python_prints(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    entry = subprocess.run([sys.executable, "-m", "hpo.verdict", "--help"], capture_output=True, text=True, env=env, timeout=120)
    assert entry.returncode == 0 and "usage:" in entry.stdout


def test_the_tests_mirror_the_packages() -> None:
    # tests/executor/<package>/ and tests/hpo/<package>/ test that package; nothing else sits at the top but this file.
    tests = ROOT / "tests"
    for tree, package in (("executor", "trial_executor"), ("hpo", "hpo")):
        folders = sorted(p.name for p in (tests / tree).iterdir() if p.is_dir() and p.name != "__pycache__")
        assert folders and all((ROOT / package / name / "__init__.py").is_file() for name in folders), (tree, folders)
    assert sorted(p.name for p in tests.glob("test_*.py")) == ["test_architecture.py"]
