"""Loads scripts/docs_check.py and scripts/gen_docs.py for the docs tests (no build needed to
import them; the flag lists and generated blocks need the built programs)."""
import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "scripts"))  # gen_docs imports docs_check by name


def _load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


docs_check = _load("docs_check")
gen_docs = _load("gen_docs")
