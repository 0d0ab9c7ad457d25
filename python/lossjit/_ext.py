"""Loads the native extension ``_lossjit``.

``pip install .`` puts it inside this package; the CMake build (CI, developers)
leaves it in ``<build>/python/``, which goes on ``PYTHONPATH`` next to
``python/``.
"""

try:
    from . import _lossjit as C  # type: ignore[attr-defined]
except ImportError:
    try:
        import _lossjit as C  # type: ignore[no-redef]
    except ImportError as error:  # pragma: no cover - exercised by hand
        raise ImportError(
            "lossjit: the native extension _lossjit is not importable. Install "
            "the package with `pip install .` from the repository root, or build "
            "with `cmake -DLOSSJIT_ENABLE_PYTHON=ON` and put <build>/python on "
            "PYTHONPATH. (" + str(error) + ")"
        ) from error

HAS_COMPILER = bool(C.has_compiler)

NO_COMPILER_MESSAGE = (
    "this build of lossjit has no compiler (configured with "
    "LOSSJIT_ENABLE_COMPILER=OFF): the CPU backend and JIT compilation are not "
    "available. CUDA tensors still run kernels from prebuilt bundles found in "
    "LOSSJIT_KERNEL_PATH (made by lossjit-aot)."
)
