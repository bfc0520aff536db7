"""The C ABI (``tessera/tessera.h``) through ctypes: finding ``libtessera``, the struct layouts, the prototypes.

Nothing here is public; the rest of the package calls ``lib.tess_*`` and :func:`check`.

Where the library comes from, first match wins:

1. ``TESSERA_LIBRARY``: the path of the library file (an error if it does not exist);
2. ``lib/`` inside the package directory (a wheel that bundles the library, its plugins in ``lib/tessera/plugins``);
3. ``build/lib/libtessera.so`` in the package's directory or any directory above it (an editable install, or running
   from the repository: the package source sits in ``bindings/python`` and the CMake build tree in ``build``);
4. ``ctypes.util.find_library("tessera")`` (an installed library on the loader's search path).

The core finds its plugins next to the library it was loaded from, so any of these brings its plugins along.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from ctypes import POINTER, c_char_p, c_int32, c_int64, c_size_t, c_uint32, c_uint64, c_void_p

from .errors import error_for

# ---- Finding and loading the library ----------------------------------------------------------------------------

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_LIBRARY_NAMES = ("libtessera.dylib",) if sys.platform == "darwin" else ("libtessera.so", "libtessera.so.0")


def _candidates() -> list[str]:
    """Every place searched, in order (the environment variable is handled by :func:`find_library`)."""
    found = [os.path.join(_PACKAGE_DIR, "lib", name) for name in _LIBRARY_NAMES]
    directory = _PACKAGE_DIR
    while True:
        found += [os.path.join(directory, "build", "lib", name) for name in _LIBRARY_NAMES]
        parent = os.path.dirname(directory)
        if parent == directory:
            return found
        directory = parent


def find_library() -> str:
    """The path (or, from the system search, the bare name) of the library to load; ImportError when none."""
    explicit = os.environ.get("TESSERA_LIBRARY")
    if explicit:
        if not os.path.isfile(explicit):
            raise ImportError(f"TESSERA_LIBRARY={explicit!r} does not name a file")
        return explicit
    for path in _candidates():
        if os.path.isfile(path):
            return path
    system = ctypes.util.find_library("tessera")
    if system:
        return system
    raise ImportError(
        "cannot find libtessera: set TESSERA_LIBRARY to the library file, or build Tessera (scripts/setup.sh) so "
        f"that build/lib/libtessera.so exists above the package.  Searched {os.path.join(_PACKAGE_DIR, 'lib')}, "
        f"build/lib in {_PACKAGE_DIR} and every directory above it, and the system library path.")


LIBRARY_PATH = find_library()
try:
    lib = ctypes.CDLL(LIBRARY_PATH)
except OSError as e:  # a file that is not a loadable library, or a missing dependency
    raise ImportError(f"cannot load libtessera from {LIBRARY_PATH!r}: {e}") from e

# ---- Structs (each starts with struct_size; keep in step with tessera.h) ---------------------------------------

Status = c_void_p  # TessStatus*: None on success
Handle = c_void_p  # TessEnv*, TessSession*, TessSessionOptions*, TessValue*

LOG_CALLBACK = ctypes.CFUNCTYPE(None, c_void_p, c_int32, c_char_p)


class _Sized(ctypes.Structure):
    """A struct whose ``struct_size`` is filled in on construction."""

    def __init__(self) -> None:
        super().__init__()
        self.struct_size = ctypes.sizeof(self)


class EnvOptions(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("log_level", c_int32),
        ("log_callback", LOG_CALLBACK),
        ("log_user_data", c_void_p),
        ("plugin_path", c_char_p),
        ("no_default_plugin_dirs", c_int32),
        ("plugin_probe_timeout_ms", c_int64),
        ("plugin_probe", c_int32),
    ]


class PluginInfo(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("path", c_char_p),
        ("name", c_char_p),
        ("version", c_char_p),
        ("state", c_int32),
        ("reason", c_char_p),
        ("abi_version", c_uint32),
        ("provider_count", c_size_t),
        ("providers", c_char_p),
    ]


class ProviderStats(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("live_instances", c_uint64),
        ("live_compiled", c_uint64),
        ("live_allocations", c_uint64),
        ("total_allocations", c_uint64),
        ("copies_to_host", c_uint64),
        ("copies_from_host", c_uint64),
        ("bytes_to_host", c_uint64),
        ("bytes_from_host", c_uint64),
    ]


class ValueInfo(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("kind", c_int32),
        ("element_type", c_int32),
        ("rank", c_int64),
        ("dims", POINTER(c_int64)),
        ("dim_params", POINTER(c_char_p)),
    ]


class PartitionInfo(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("provider", c_char_p),
        ("node_count", c_size_t),
        ("node_names", POINTER(c_char_p)),
        ("node_ops", POINTER(c_char_p)),
        ("input_count", c_size_t),
        ("inputs", POINTER(c_char_p)),
        ("output_count", c_size_t),
        ("outputs", POINTER(c_char_p)),
        ("copy_count", c_size_t),
    ]


class ModelMetadata(_Sized):
    _fields_ = [
        ("struct_size", c_size_t),
        ("producer_name", c_char_p),
        ("producer_version", c_char_p),
        ("domain", c_char_p),
        ("description", c_char_p),
        ("graph_name", c_char_p),
        ("graph_description", c_char_p),
        ("model_version", c_int64),
        ("custom_count", c_size_t),
        ("custom_keys", POINTER(c_char_p)),
        ("custom_values", POINTER(c_char_p)),
    ]


# ---- Prototypes --------------------------------------------------------------------------------------------------

_PROTOTYPES = {
    # name: (restype, argtypes)
    "tess_version": (c_char_p, []),
    "tess_status_code": (c_int32, [Status]),
    "tess_status_message": (c_char_p, [Status]),
    "tess_status_release": (None, [Status]),
    "tess_env_create": (Status, [POINTER(EnvOptions), POINTER(Handle)]),
    "tess_env_release": (None, [Handle]),
    "tess_env_load_plugin": (Status, [Handle, c_char_p]),
    "tess_env_plugin_count": (c_size_t, [Handle]),
    "tess_env_plugin_info": (Status, [Handle, c_size_t, POINTER(PluginInfo)]),
    "tess_env_provider_count": (c_size_t, [Handle]),
    "tess_env_provider_name": (c_char_p, [Handle, c_size_t]),
    "tess_env_provider_stats": (Status, [Handle, c_char_p, POINTER(ProviderStats)]),
    "tess_session_options_create": (Status, [POINTER(Handle)]),
    "tess_session_options_release": (None, [Handle]),
    "tess_session_options_set_providers": (Status, [Handle, POINTER(c_char_p), c_size_t]),
    "tess_session_options_set_intra_op_threads": (Status, [Handle, c_int32]),
    "tess_session_options_set_strict": (Status, [Handle, c_int32]),
    "tess_session_options_set_optimization_level": (Status, [Handle, c_int32]),
    "tess_session_options_set_profiling": (Status, [Handle, c_char_p]),
    "tess_session_options_set_optimized_model_path": (Status, [Handle, c_char_p]),
    "tess_session_options_set_memory_limit": (Status, [Handle, c_uint64]),
    "tess_session_create": (Status, [Handle, c_char_p, Handle, POINTER(Handle)]),
    "tess_session_create_from_bytes": (Status, [Handle, c_void_p, c_size_t, c_char_p, Handle, POINTER(Handle)]),
    "tess_session_release": (None, [Handle]),
    "tess_session_input_count": (c_size_t, [Handle]),
    "tess_session_output_count": (c_size_t, [Handle]),
    "tess_session_input_info": (Status, [Handle, c_size_t, POINTER(ValueInfo)]),
    "tess_session_output_info": (Status, [Handle, c_size_t, POINTER(ValueInfo)]),
    "tess_session_partition_count": (c_size_t, [Handle]),
    "tess_session_model_metadata": (Status, [Handle, POINTER(ModelMetadata)]),
    "tess_session_input_has_default": (c_int32, [Handle, c_size_t]),
    "tess_session_partition_info": (Status, [Handle, c_size_t, POINTER(PartitionInfo)]),
    "tess_session_end_profiling": (Status, [Handle, POINTER(c_char_p)]),
    "tess_session_profiling_summary": (Status, [Handle, c_size_t, POINTER(c_char_p)]),
    "tess_session_run": (Status, [Handle, POINTER(c_char_p), POINTER(Handle), c_size_t, POINTER(c_char_p), c_size_t,
                                  POINTER(Handle)]),
    "tess_run_options_create": (Status, [POINTER(Handle)]),
    "tess_run_options_release": (None, [Handle]),
    "tess_run_options_set_terminate": (Status, [Handle, c_int32]),
    "tess_run_options_get_terminate": (c_int32, [Handle]),
    "tess_run_options_set_timeout_ms": (Status, [Handle, c_int64]),
    "tess_run_options_set_log_tag": (Status, [Handle, c_char_p]),
    "tess_run_options_get_log_tag": (c_char_p, [Handle]),
    "tess_run_options_set_profile_path": (Status, [Handle, c_char_p]),
    "tess_session_run_with_options": (Status, [Handle, Handle, POINTER(c_char_p), POINTER(Handle), c_size_t,
                                               POINTER(c_char_p), c_size_t, POINTER(Handle)]),
    "tess_value_create_tensor": (Status, [c_int32, POINTER(c_int64), c_size_t, POINTER(Handle)]),
    "tess_value_create_tensor_over": (Status, [c_int32, POINTER(c_int64), c_size_t, c_void_p, c_size_t, c_void_p,
                                               c_void_p, POINTER(Handle)]),
    "tess_value_create_sequence": (Status, [c_int32, POINTER(Handle), c_size_t, POINTER(Handle)]),
    "tess_value_create_optional": (Status, [c_int32, Handle, POINTER(Handle)]),
    "tess_value_release": (None, [Handle]),
    "tess_value_kind": (c_int32, [Handle]),
    "tess_value_element_type": (c_int32, [Handle]),
    "tess_tensor_rank": (c_size_t, [Handle]),
    "tess_tensor_dims": (POINTER(c_int64), [Handle]),
    "tess_tensor_element_count": (c_size_t, [Handle]),
    "tess_tensor_byte_size": (c_size_t, [Handle]),
    "tess_tensor_data": (c_void_p, [Handle]),
    "tess_tensor_get_string": (Status, [Handle, c_size_t, POINTER(c_void_p), POINTER(c_size_t)]),
    "tess_tensor_set_string": (Status, [Handle, c_size_t, c_char_p, c_size_t]),
    "tess_sequence_length": (c_size_t, [Handle]),
    "tess_sequence_at": (Handle, [Handle, c_size_t]),
    "tess_optional_has_value": (c_int32, [Handle]),
    "tess_optional_value": (Handle, [Handle]),
    "tess_element_size": (c_size_t, [c_int32]),
    "tess_element_storage_bytes": (c_size_t, [c_int32, c_size_t]),
    "tess_element_type_name": (c_char_p, [c_int32]),
}

for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    try:
        _function = getattr(lib, _name)
    except AttributeError as e:
        raise ImportError(f"{LIBRARY_PATH!r} is not a compatible libtessera: it lacks {_name}") from e
    _function.restype = _restype
    _function.argtypes = _argtypes


# ---- Helpers -----------------------------------------------------------------------------------------------------

def check(status: int | None) -> None:
    """Raises the status as a TesseraError (releasing it first); does nothing for success (None)."""
    if not status:
        return
    try:
        code = lib.tess_status_code(status)
        message = decode(lib.tess_status_message(status))
    finally:
        lib.tess_status_release(status)
    raise error_for(code, message)


def decode(text: bytes | None) -> str:
    """A C string from the library as str ("" for NULL); invalid UTF-8 is replaced, never an error."""
    return "" if text is None else text.decode("utf-8", errors="replace")


def strings(array, count: int) -> list[str]:
    """``count`` C strings from a ``const char* const*``."""
    return [decode(array[i]) for i in range(count)] if count else []


def c_strings(names) -> ctypes.Array:
    """A ``const char*[]`` for a list of str (the returned array keeps the encoded bytes alive)."""
    encoded = [n.encode("utf-8") for n in names]
    return (c_char_p * max(len(encoded), 1))(*encoded)


def version() -> str:
    return decode(lib.tess_version())
