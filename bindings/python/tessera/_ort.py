"""What code written for onnxruntime's Python API expects besides ``InferenceSession``: ``SessionOptions``,
``GraphOptimizationLevel``, ``ExecutionMode``, ``ModelMetadata``, ``OrtValue``, the provider names and the module
functions.  With ``sys.modules["onnxruntime"] = tessera`` (or ``import tessera as onnxruntime``) such code runs on
Tessera unchanged; ``tessera.InferenceSession`` takes these objects where onnxruntime does.

Options that have no Tessera counterpart (memory arena switches, inter-op threads, ...) are accepted and kept, so
``get_session_options()`` returns what was set, and have no effect; each is named in its docstring.
"""

from __future__ import annotations

import ctypes
import enum
import time
import warnings
from typing import Any

import numpy as np

from . import _types as T
from ._capi import decode, lib
from .errors import InvalidArgument

# onnxruntime provider names and Tessera's.  A Tessera provider without an onnxruntime name keeps its own.
_ORT_TO_TESSERA = {"CPUExecutionProvider": "cpu", "CUDAExecutionProvider": "cuda"}
_TESSERA_TO_ORT = {v: k for k, v in _ORT_TO_TESSERA.items()}
# onnxruntime providers Tessera has no counterpart for: asking for one is an error naming what is available.
_ORT_ONLY = {"TensorrtExecutionProvider", "ROCMExecutionProvider", "MIGraphXExecutionProvider",
             "OpenVINOExecutionProvider", "DnnlExecutionProvider", "CoreMLExecutionProvider",
             "DmlExecutionProvider", "QNNExecutionProvider", "XnnpackExecutionProvider", "NnapiExecutionProvider",
             "AzureExecutionProvider", "WebGpuExecutionProvider", "VitisAIExecutionProvider",
             "ACLExecutionProvider", "ArmNNExecutionProvider", "CANNExecutionProvider", "JsExecutionProvider",
             "TvmExecutionProvider", "RknpuExecutionProvider", "SNPEExecutionProvider"}


def ort_provider_name(tessera_name: str) -> str:
    return _TESSERA_TO_ORT.get(tessera_name, tessera_name)


def tessera_provider_name(name: str, available: list[str]) -> str:
    """The Tessera provider for an onnxruntime or Tessera provider name; InvalidArgument when there is none."""
    if name in _ORT_TO_TESSERA:
        return _ORT_TO_TESSERA[name]
    if name in _ORT_ONLY or name.endswith("ExecutionProvider"):
        have = ", ".join(ort_provider_name(p) for p in available) or "none"
        raise InvalidArgument(f"provider {name!r} has no Tessera counterpart (available: {have})")
    return name


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


def tessera_optimization_level(level: Any) -> int:
    """Tessera's level (0 disabled, 1 basic, 2 extended, 3 all) for an onnxruntime level or a Tessera one."""
    if isinstance(level, bool) or not isinstance(level, int):
        raise InvalidArgument(f"graph_optimization_level must be a GraphOptimizationLevel, not {level!r}")
    if level in (0, 1, 2):
        return int(level)
    if level in (3, 99):
        return 3
    raise InvalidArgument(f"graph_optimization_level {level} is none of onnxruntime's levels (0, 1, 2, 3, 99)")


class ExecutionMode(enum.IntEnum):
    """Accepted for onnxruntime code; Tessera runs the graph in order, using the intra-op pool inside nodes."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    """Accepted for onnxruntime code; Tessera orders nodes topologically in model order."""

    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class SessionOptions:
    """onnxruntime's ``SessionOptions``.  Used by Tessera: ``intra_op_num_threads``, ``graph_optimization_level``,
    ``enable_profiling`` with ``profile_file_prefix``, ``optimized_model_filepath``, ``log_severity_level`` (0-4:
    verbose, info, warning, error, fatal), ``register_custom_ops_library``.  Accepted without effect:
    ``inter_op_num_threads``, ``execution_mode``, ``execution_order``, ``enable_cpu_mem_arena``,
    ``enable_mem_pattern``, ``enable_mem_reuse``, ``use_deterministic_compute`` (Tessera's kernels are
    deterministic), ``log_verbosity_level``, ``logid`` and the session config entries."""

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = ExecutionOrder.DEFAULT
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self._config: dict[str, str] = {}
        self._custom_op_libraries: list[str] = []
        self._free_dimensions: dict[str, int] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InvalidArgument(f"session config entry {key!r} is not set")
        return self._config[key]

    def register_custom_ops_library(self, path: str) -> None:
        """A custom-operator library: in Tessera a custom-op plugin, loaded into the session's environment."""
        self._custom_op_libraries.append(str(path))

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        """Kept for onnxruntime code; Tessera sizes symbolic dimensions from each run's inputs."""
        self._free_dimensions[str(name)] = int(value)

    def profile_file(self) -> str:
        """The trace file onnxruntime would write: the prefix, then the date and time."""
        return f"{self.profile_file_prefix}{time.strftime('%Y-%m-%d_%H-%M-%S')}.json"


class ModelMetadata:
    """onnxruntime's ``ModelMetadata``: what the model says about itself."""

    def __init__(self, producer_name: str, graph_name: str, graph_description: str, domain: str, description: str,
                 version: int, custom_metadata_map: dict[str, str]) -> None:
        self.producer_name = producer_name
        self.graph_name = graph_name
        self.graph_description = graph_description
        self.domain = domain
        self.description = description
        self.version = version
        self.custom_metadata_map = custom_metadata_map

    def __repr__(self) -> str:
        return (f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r}, "
                f"version={self.version}, custom_metadata_map={self.custom_metadata_map!r})")


class OrtValue:
    """onnxruntime's ``OrtValue`` for host memory: a tensor (or sequence, optional) held by the runtime.  From numpy
    with ``ortvalue_from_numpy`` (the array is referenced, not copied, when its layout allows), back with
    ``numpy()``.  Only the CPU device exists."""

    def __init__(self, value: Any, _keep: Any = None) -> None:
        self._value = value  # numpy array, list, or None: what from_value produced, or what the caller gave
        self._keep = _keep

    @staticmethod
    def ortvalue_from_numpy(array: Any, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        if str(device_type).lower() != "cpu" or device_id != 0:
            raise InvalidArgument(f"OrtValue on {device_type}:{device_id}: Tessera's Python values live on the CPU")
        return OrtValue(np.asarray(array))

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Any, element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0) -> OrtValue:
        return OrtValue.ortvalue_from_numpy(np.zeros(tuple(shape), dtype=element_type), device_type, device_id)

    def numpy(self) -> Any:
        return self._value

    def is_tensor(self) -> bool:
        return isinstance(self._value, np.ndarray)

    def has_value(self) -> bool:
        return self._value is not None

    def shape(self) -> list[int]:
        return list(np.shape(self._value)) if self.is_tensor() else []

    def element_type(self) -> Any:
        return self._value.dtype.type if self.is_tensor() else None

    def data_type(self) -> str:
        if not self.is_tensor():
            return "seq" if isinstance(self._value, list) else "optional"
        element_type = T.element_type_of(self._value.dtype)
        name = decode(lib.tess_element_type_name(element_type)) if element_type is not None else str(self._value.dtype)
        return f"tensor({name})"

    def device_name(self) -> str:
        return "cpu"

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, shape={self.shape()})"


class IOBinding:
    """onnxruntime's ``IOBinding`` for host memory: inputs and outputs bound by name ahead of a run, then
    ``InferenceSession.run_with_iobinding``.  Only the CPU device exists; a bound numpy input is read in place when
    its layout allows, as ``run`` does."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._inputs: dict[str, Any] = {}
        self._output_names: list[str] = []
        self._outputs: list[OrtValue] = []

    @staticmethod
    def _check_device(device_type: str, device_id: int) -> None:
        if str(device_type).lower() != "cpu" or device_id != 0:
            raise InvalidArgument(f"binding on {device_type}:{device_id}: Tessera's Python values live on the CPU")

    def bind_cpu_input(self, name: str, array: Any) -> None:
        self._inputs[name] = np.asarray(array)

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Any,
                   buffer_ptr: int) -> None:
        """Binds host memory at ``buffer_ptr`` (it must stay valid until the run) as a tensor of ``shape``."""
        self._check_device(device_type, device_id)
        dtype = np.dtype(element_type)
        count = int(np.prod(shape)) if len(shape) else 1
        buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(int(buffer_ptr))
        self._inputs[name] = np.frombuffer(buffer, dtype=dtype, count=count).reshape(tuple(shape))

    def bind_ortvalue_input(self, name: str, value: OrtValue) -> None:
        self._inputs[name] = value.numpy()

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Any = None, buffer_ptr: int | None = None) -> None:
        """Binds an output by name; the runtime allocates it (a preallocated ``buffer_ptr`` is not supported)."""
        self._check_device(device_type, device_id)
        if buffer_ptr is not None:
            raise InvalidArgument("bind_output with a preallocated buffer is not supported; let the runtime allocate")
        self._output_names.append(name)

    def bind_ortvalue_output(self, name: str, value: OrtValue) -> None:  # noqa: ARG002 - filled by the run
        self._output_names.append(name)

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._output_names.clear()
        self._outputs = []

    def synchronize_inputs(self) -> None:
        """Host memory needs no synchronization."""

    def synchronize_outputs(self) -> None:
        """Host memory needs no synchronization."""

    def get_outputs(self) -> list[OrtValue]:
        return list(self._outputs)

    def copy_outputs_to_cpu(self) -> list[Any]:
        return [value.numpy() for value in self._outputs]

    def _run(self, run_options: Any) -> None:
        names = self._output_names or None
        self._outputs = [OrtValue(v) for v in self._session.run(names, dict(self._inputs), run_options)]


_default_logger_severity = 2


def set_default_logger_severity(level: int) -> None:
    """onnxruntime's default log severity (0 verbose ... 4 fatal): the level of the default environment's log,
    applied when it is created (warnings and errors go to stderr either way)."""
    global _default_logger_severity
    if isinstance(level, bool) or not isinstance(level, int) or not 0 <= level <= 4:
        raise InvalidArgument(f"log severity must be 0 (verbose) to 4 (fatal), not {level!r}")
    _default_logger_severity = level


def set_default_logger_verbosity(level: int) -> None:  # noqa: ARG001 - onnxruntime's verbose-level knob
    """Accepted for onnxruntime code; Tessera has no verbosity levels below 'verbose'."""


def disable_telemetry_events() -> None:
    """Tessera sends no telemetry: nothing to disable."""


def enable_telemetry_events() -> None:
    """Tessera sends no telemetry: nothing to enable."""


def get_all_providers() -> list[str]:
    """Every provider name onnxruntime knows, as its ``get_all_providers``; those Tessera can run are in
    ``get_available_providers()``."""
    return sorted(set(_ORT_TO_TESSERA) | _ORT_ONLY)


def default_logger_severity() -> int:
    return _default_logger_severity


def ignored_provider_options(name: str, options: dict[str, Any]) -> None:
    """Provider options Tessera's providers do not take: said once, then ignored."""
    if options:
        warnings.warn(f"{name}: provider options {sorted(options)} have no Tessera counterpart and are ignored",
                      stacklevel=3)


__all__ = ["ExecutionMode", "ExecutionOrder", "GraphOptimizationLevel", "IOBinding", "ModelMetadata", "OrtValue",
           "SessionOptions", "disable_telemetry_events", "enable_telemetry_events", "get_all_providers",
           "set_default_logger_severity", "set_default_logger_verbosity"]
