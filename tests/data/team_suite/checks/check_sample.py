import os
import signal
import time
import warnings

import pytest
from packaging.version import Version


def test_fixture(answer):
    assert answer == 42


@pytest.mark.parametrize("n", [1, 2, 3])
def test_param(n):
    assert n < 3, f"{n} is too big"


def test_skipped():
    pytest.skip("needs a GPU")


@pytest.mark.xfail(reason="known bug")
def test_xfail():
    assert 1 == 2


@pytest.mark.xfail(reason="fixed upstream")
def test_xpass():
    assert True


@pytest.mark.xfail(reason="must fail", strict=True)
def test_xpass_strict():
    assert True


def test_library_error():
    Version("not a version")


def test_setup_error(broken):
    assert broken


def test_teardown_error(leaky):
    assert leaky == "ok"


def test_warning_is_an_error():
    warnings.warn("old API", DeprecationWarning, stacklevel=1)


@pytest.mark.excluded
def test_excluded():
    raise AssertionError("addopts leaves this out")


@pytest.mark.slowish
def test_segfault():
    os.kill(os.getpid(), signal.SIGSEGV)


def test_after_crash():
    assert True


@pytest.mark.slowish
def test_hang():
    time.sleep(600)


def test_after_hang():
    assert True
