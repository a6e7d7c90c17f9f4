import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def micro_model(tmp_path_factory) -> Path:
    """A randomly initialised model of the `micro` preset, in Hugging Face format."""
    from reasoner.modeling import init_model

    return init_model(tmp_path_factory.mktemp("micro") / "model", preset="micro", seed=0)


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"public data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="module")
def sandbox():
    """Two warm sandbox workers, shared by one test module."""
    from sandbox import Sandbox

    sb = Sandbox(workers=2)
    yield sb
    sb.close()


@pytest.fixture(params=["unpadded", "own forward"])
def forward_path(request, monkeypatch):
    """Each test once with the unpadded Llama forward (reasoner/training/unpadded.py) and once with the
    model's own padded forward."""
    from reasoner.training import unpadded

    if request.param == "own forward":
        monkeypatch.setattr(unpadded, "supports", lambda model: False)
    return request.param
