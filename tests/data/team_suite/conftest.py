import pytest


@pytest.fixture
def answer():
    return 42


@pytest.fixture
def broken():
    raise RuntimeError("the fixture could not start")


@pytest.fixture
def leaky():
    yield "ok"
    raise OSError("the fixture could not clean up")
