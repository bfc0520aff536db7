"""Environments (plugin discovery) and inference sessions, shaped like onnxruntime's Python API."""

from __future__ import annotations

import ctypes
import enum
import os
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Mapping, Sequence

from . import _types as T
from ._capi import LOG_CALLBACK, EnvOptions, Handle, ModelMetadata, PartitionInfo, PluginInfo, ProviderStats, \
    ValueInfo, c_strings, check, decode, lib, strings
from ._values import from_value, to_value
from . import _ort
from .errors import InvalidArgument

__all__ = ["LogLevel", "Environment", "NodeArg", "InferenceSession", "get_default_environment", "plugins",
           "get_available_providers"]


class LogLevel(enum.IntEnum):
    """``TessLogLevel``: messages above the environment's level are dropped."""

    ERROR = 0
    WARNING = 1
    INFO = 2
    DEBUG = 3


_PLUGIN_STATES = {0: "loaded", 1: "unavailable", 2: "skipped"}
# TessPluginProbe (tessera.h): how plugin files are probed in a child process before they are loaded.
_PLUGIN_PROBE_MODES = {"auto": 0, "off": 1, "rescan": 2}



class Environment:
    """A Tessera environment: the plugins found by discovery, and the log destination.

    Sessions created in an environment keep it alive.  Most programs use the process-wide default
    (:func:`get_default_environment`); create one to search other plugin directories or to capture the log.

    Args:
        plugin_path: directories searched after ``<libdir>/tessera/plugins`` and ``TESSERA_PLUGIN_PATH`` (a
            colon-separated string or a list).
        no_default_plugin_dirs: search only ``plugin_path`` (and files given to :meth:`load_plugin`).
        log_level: a :class:`LogLevel`; messages above it are dropped.
        log_callback: ``callback(level, message)`` receives the log instead of stderr; it may be called from the
            runtime's threads, and exceptions it raises are ignored.
        plugin_probe: ``"auto"`` (default) loads each plugin file in a child process first and skips, with the
            reason in :meth:`plugins`, one that crashes, aborts, exits or hangs there (verdicts are cached per file);
            ``"off"`` loads plugins in this process unprobed; ``"rescan"`` probes every file again.
        plugin_probe_timeout: seconds a plugin may take in its probe before it counts as hung (default: the
            ``TESSERA_PLUGIN_PROBE_TIMEOUT_MS`` environment variable, or 10).
    """

    def __init__(self, plugin_path: str | Sequence[str] | None = None, no_default_plugin_dirs: bool = False,
                 log_level: int = LogLevel.WARNING, log_callback: Callable[[int, str], None] | None = None,
                 plugin_probe: str = "auto", plugin_probe_timeout: float | None = None) -> None:
        if plugin_path is not None and not isinstance(plugin_path, (str, os.PathLike)):
            plugin_path = os.pathsep.join(os.fspath(p) for p in plugin_path)
        if plugin_probe not in _PLUGIN_PROBE_MODES:
            raise InvalidArgument(f"plugin_probe must be one of {', '.join(_PLUGIN_PROBE_MODES)}, not {plugin_probe!r}")
        if plugin_probe_timeout is not None and not plugin_probe_timeout > 0:
            raise InvalidArgument(
                f"plugin_probe_timeout must be a positive number of seconds, not {plugin_probe_timeout!r}")
        options = EnvOptions()
        options.log_level = int(log_level)
        self._log_trampoline = None
        if log_callback is not None:
            def trampoline(_user_data, level, message, _callback=log_callback):
                try:
                    _callback(LogLevel(level) if level in LogLevel._value2member_map_ else level, decode(message))
                except BaseException:  # noqa: BLE001 - nothing may propagate into C
                    pass
            self._log_trampoline = LOG_CALLBACK(trampoline)  # kept alive as long as the environment
            options.log_callback = self._log_trampoline
        options.plugin_path = os.fspath(plugin_path).encode("utf-8") if plugin_path else None
        options.no_default_plugin_dirs = 1 if no_default_plugin_dirs else 0
        options.plugin_probe = _PLUGIN_PROBE_MODES[plugin_probe]
        if plugin_probe_timeout is not None:
            options.plugin_probe_timeout_ms = max(1, round(plugin_probe_timeout * 1000))
        handle = Handle()
        check(lib.tess_env_create(ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle.value
        # The finalizer holds the log trampoline too: the core may call it until the environment is released.
        self._finalizer = weakref.finalize(self, _release_env, self._handle, self._log_trampoline)

    @property
    def handle(self) -> int:
        """The ``TessEnv*`` (for interoperation with other ctypes code)."""
        return self._handle

    def load_plugin(self, path: str | os.PathLike) -> None:
        """Loads one plugin file; raises with the reason when it was skipped.  Sessions created before do not see
        it."""
        check(lib.tess_env_load_plugin(self._handle, os.fspath(path).encode("utf-8")))

    def plugins(self) -> list[dict[str, Any]]:
        """The discovery report: one dict per candidate file, with ``path``, ``name``, ``version``, ``state``
        ('loaded', 'unavailable' or 'skipped'), ``reason``, ``abi_version`` and ``providers`` (a list of names)."""
        report = []
        for i in range(lib.tess_env_plugin_count(self._handle)):
            info = PluginInfo()
            check(lib.tess_env_plugin_info(self._handle, i, ctypes.byref(info)))
            providers = decode(info.providers)
            report.append({
                "path": decode(info.path),
                "name": decode(info.name),
                "version": decode(info.version),
                "state": _PLUGIN_STATES.get(info.state, str(info.state)),
                "reason": decode(info.reason),
                "abi_version": int(info.abi_version),
                "providers": [p for p in providers.split(",") if p],
            })
        return report

    def providers(self) -> list[str]:
        """Names of the usable execution providers, in default priority order (CPU last)."""
        return [decode(lib.tess_env_provider_name(self._handle, i))
                for i in range(lib.tess_env_provider_count(self._handle))]

    def provider_stats(self, provider: str) -> dict[str, int]:
        """What the core has asked of `provider` so far (tess_env_provider_stats): live instances, compiled
        partitions and allocations, total allocations, and the copies and bytes across its memory boundary."""
        stats = ProviderStats()
        check(lib.tess_env_provider_stats(self._handle, provider.encode(), ctypes.byref(stats)))
        return {name: int(getattr(stats, name)) for name, _ in ProviderStats._fields_[1:]}


def _release_env(handle: int, log_trampoline: Any) -> None:  # noqa: ARG001 - keeps the trampoline alive
    lib.tess_env_release(handle)


_default_env: Environment | None = None
_default_env_lock = threading.Lock()


def get_default_environment() -> Environment:
    """The process-wide environment, created on first use with the default plugin directories."""
    global _default_env
    with _default_env_lock:
        if _default_env is None:
            _default_env = Environment()
        return _default_env


def plugins() -> list[dict[str, Any]]:
    """The default environment's plugin discovery report (see :meth:`Environment.plugins`)."""
    return get_default_environment().plugins()


def get_available_providers() -> list[str]:
    """The default environment's usable providers, in default priority order, under onnxruntime's names where
    they have one ('CPUExecutionProvider', 'CUDAExecutionProvider'), so that code written for onnxruntime finds
    them; ``get_default_environment().providers()`` gives Tessera's own names."""
    return [_ort.ort_provider_name(p) for p in get_default_environment().providers()]


def get_device() -> str:
    """onnxruntime's device string: 'GPU' when a CUDA provider is usable, else 'CPU'."""
    return "GPU" if "cuda" in get_default_environment().providers() else "CPU"


class NodeArg:
    """A graph input or output, as onnxruntime describes it.

    Attributes:
        name: the value's name.
        type: 'tensor(float)', 'seq(tensor(int64))', 'optional(tensor(string))', ...
        shape: a list with an int per fixed dimension, the symbolic name (str) or None for the others; None when
            even the rank is unknown.  For sequences and optionals: the shape of the tensors inside, when known.
        kind, element_type: the raw ``TessValueKind`` and ``TessElementType`` numbers.
    """

    __slots__ = ("name", "type", "shape", "kind", "element_type")

    def __init__(self, info: ValueInfo) -> None:
        self.name = decode(info.name)
        self.kind = int(info.kind)
        self.element_type = int(info.element_type)
        tensor = f"tensor({decode(lib.tess_element_type_name(self.element_type))})"
        self.type = {T.KIND_SEQUENCE: f"seq({tensor})", T.KIND_OPTIONAL: f"optional({tensor})",
                     T.KIND_MAP: "map"}.get(self.kind, tensor)
        if info.rank < 0:
            self.shape = None
        else:
            self.shape = []
            for i in range(info.rank):
                param = decode(info.dim_params[i]) if info.dim_params else ""
                dim = int(info.dims[i])
                self.shape.append(dim if dim >= 0 else (param or None))

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


def _providers_with_options(providers: Iterable[Any], provider_options: Sequence[Any] | None,
                            available: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """Tessera provider names and the options given with them, from onnxruntime's forms: names (onnxruntime's or
    Tessera's), ``(name, options)`` tuples, and a parallel ``provider_options`` list."""
    providers = list(providers)
    if provider_options is not None and len(provider_options) != len(providers):
        raise InvalidArgument(f"provider_options has {len(provider_options)} entries for {len(providers)} providers")
    names, options = [], []
    for i, p in enumerate(providers):
        given: Any = {}
        if isinstance(p, (tuple, list)):  # onnxruntime's (name, options) form
            if len(p) != 2 or not isinstance(p[1], Mapping):
                raise InvalidArgument(f"provider {p!r}: expected (name, options dict)")
            p, given = p
        if provider_options is not None:
            given = {**dict(given), **dict(provider_options[i] or {})}
        if not isinstance(p, str):
            raise InvalidArgument(f"provider names are strings, not {type(p).__name__}")
        name = _ort.tessera_provider_name(p, available)
        _ort.ignored_provider_options(p, {k: v for k, v in dict(given).items() if not (k == "device_id" and
                                                                                       str(v) == "0")})
        names.append(name)
        options.append({str(k): str(v) for k, v in dict(given).items()})
    return names, options


def _c_int32(name: str, value: Any) -> int:
    """An integer option as the C API takes it; out of range is an error, never a silent wrap-around."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"{name} must be an int, not {type(value).__name__}")
    if not -2**31 <= value < 2**31:
        raise InvalidArgument(f"{name} {value} is out of range")
    return value


class RunOptions:
    """Options of a run, as onnxruntime's ``RunOptions``: set ``terminate = True`` from any thread to stop the runs
    using these options (they raise :class:`tessera.Cancelled`, and later runs with them fail at once until it is
    set back to False); ``timeout_ms`` > 0 stops a run that takes longer.  Runs stop between nodes (and between
    iterations of Loop and Scan); the session stays usable.  ``logid`` (onnxruntime's name for it) tags the messages
    logged while such a run is in progress with "[run LOGID] "; ``profile_path`` writes each run's own Chrome trace
    there (tess_run_options_set_profile_path).  ``log_severity_level`` and ``log_verbosity_level`` are kept for
    onnxruntime code and not used."""

    def __init__(self) -> None:
        handle = Handle()
        check(lib.tess_run_options_create(ctypes.byref(handle)))
        self._handle = handle.value
        self._timeout_ms = 0
        self._finalizer = weakref.finalize(self, lib.tess_run_options_release, self._handle)
        self._profile_path = ""
        self.log_severity_level = 2
        self.log_verbosity_level = 0

    @property
    def terminate(self) -> bool:
        return bool(lib.tess_run_options_get_terminate(self._handle))

    @terminate.setter
    def terminate(self, value: bool) -> None:
        check(lib.tess_run_options_set_terminate(self._handle, 1 if value else 0))

    @property
    def timeout_ms(self) -> int:
        return self._timeout_ms

    @timeout_ms.setter
    def timeout_ms(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidArgument(f"timeout_ms must be an int, not {type(value).__name__}")
        check(lib.tess_run_options_set_timeout_ms(self._handle, value))
        self._timeout_ms = value

    @property
    def logid(self) -> str:
        return lib.tess_run_options_get_log_tag(self._handle).decode()

    @logid.setter
    def logid(self, value: str) -> None:
        check(lib.tess_run_options_set_log_tag(self._handle, str(value).encode()))

    @property
    def profile_path(self) -> str:
        return self._profile_path

    @profile_path.setter
    def profile_path(self, value: str | os.PathLike[str]) -> None:
        path = os.fspath(value) if value else ""
        check(lib.tess_run_options_set_profile_path(self._handle, path.encode()))
        self._profile_path = path


# onnxruntime's log severities (0 verbose ... 4 fatal) as Tessera log levels.
_ORT_SEVERITY_TO_LEVEL = {0: LogLevel.DEBUG, 1: LogLevel.INFO, 2: LogLevel.WARNING, 3: LogLevel.ERROR,
                          4: LogLevel.ERROR}


class InferenceSession:
    """A loaded, optimized, partitioned and compiled model.

    Args:
        path_or_bytes: a model file path, serialized ModelProto bytes, or an ``onnx.ModelProto``.  External data
            is read from the model file's directory (and is not allowed for bytes).
        sess_options: an onnxruntime-style :class:`tessera.SessionOptions`; keyword arguments below win over it.
        providers: the provider priority list, most preferred first (``None``: every usable provider, CPU last):
            Tessera's names or onnxruntime's ('CPUExecutionProvider', 'CUDAExecutionProvider'), alone or as
            ``(name, options)``; an onnxruntime provider Tessera has no counterpart for is an error.
        provider_options: onnxruntime's list of option dicts, one per provider.  Tessera's providers take no
            options yet: they are kept (``get_provider_options``) and a warning names them.
        strict: a node no listed provider claims, or a listed provider that is missing or fails, is an error
            instead of a fallback.
        intra_op_threads: threads of the session's pool; 0 means one per core.
        optimization_level: 0 disables the graph optimizer, 1 basic rewrites, 2 adds fusions, 3 (or 99) everything.
        plugin_path: extra plugin directories; the session gets its own :class:`Environment` searching them.
        environment: the environment to use (default: :func:`get_default_environment`).
        enable_profiling: record session creation, every run and every node into a Chrome trace file (Perfetto
            opens it), written by :meth:`end_profiling` or when the session is released; as onnxruntime's
            ``SessionOptions.enable_profiling``.  The file is ``profile_file``, or
            ``tessera_profile_<date>_<time>.json`` in the current directory.
        profile_file: the trace file's path; giving it turns profiling on.
        optimized_model_filepath: save the graph the optimizer produced (at ``optimization_level``, before
            partitioning) to this ONNX file during session creation, as onnxruntime's
            ``SessionOptions.optimized_model_filepath``.  Fused nodes keep the optimizer's ``ai.tessera`` domain, which
            Tessera runs; a model over 2 GiB keeps its larger initializers in ``<file>.data`` next to it.  A file
            that cannot be written fails session creation.
        memory_limit_bytes: a limit on what each execution provider allocates while the session runs (outputs,
            run buffers; not the weights): a run that would pass it raises :class:`tessera.OutOfMemory` and the
            session stays usable.  0 (default): no limit.

    ``run`` may be called from several threads at once; the GIL is released while Tessera computes.
    """

    def __init__(self, path_or_bytes: str | os.PathLike | bytes | Any,
                 sess_options: _ort.SessionOptions | None = None, providers: Sequence[Any] | None = None,
                 provider_options: Sequence[Any] | None = None, *, strict: bool = False,
                 intra_op_threads: int | None = None, optimization_level: int | None = None,
                 plugin_path: str | Sequence[str] | None = None, environment: Environment | None = None,
                 enable_profiling: bool | None = None, profile_file: str | os.PathLike | None = None,
                 optimized_model_filepath: str | os.PathLike | None = None, memory_limit_bytes: int = 0,
                 disabled_optimizers: Sequence[str] | None = None) -> None:  # noqa: ARG002 - onnxruntime's
        if sess_options is not None and not isinstance(sess_options, _ort.SessionOptions):
            raise InvalidArgument(f"sess_options must be a tessera.SessionOptions, not {type(sess_options).__name__}")
        so = sess_options or _ort.SessionOptions()
        self._session_options = so
        # Explicit keyword arguments win over the SessionOptions.
        if intra_op_threads is None:
            intra_op_threads = so.intra_op_num_threads
        if optimization_level is None:
            optimization_level = _ort.tessera_optimization_level(so.graph_optimization_level)
        if enable_profiling is None:
            enable_profiling = so.enable_profiling
        if enable_profiling and not profile_file and sess_options is not None:
            profile_file = so.profile_file()  # onnxruntime's file name, from its prefix
        if not optimized_model_filepath and so.optimized_model_filepath:
            optimized_model_filepath = so.optimized_model_filepath

        custom_ops = list(so._custom_op_libraries)
        if environment is None:
            severity = so.log_severity_level if sess_options is not None else _ort.default_logger_severity()
            if plugin_path or custom_ops or severity != 2:
                environment = Environment(plugin_path=plugin_path, log_level=_ORT_SEVERITY_TO_LEVEL.get(severity,
                                                                                                        LogLevel.ERROR))
            else:
                environment = get_default_environment()
        elif plugin_path:
            raise InvalidArgument("pass either plugin_path or environment, not both")
        for library in custom_ops:
            environment.load_plugin(library)
        self._env = environment
        self._requested, self._provider_options = None, None
        if providers:
            self._requested, self._provider_options = _providers_with_options(providers, provider_options,
                                                                              environment.providers())

        options = Handle()
        check(lib.tess_session_options_create(ctypes.byref(options)))
        session = Handle()
        try:
            if self._requested:
                names = c_strings(self._requested)
                check(lib.tess_session_options_set_providers(options, names, len(self._requested)))
            check(lib.tess_session_options_set_strict(options, 1 if strict else 0))
            check(lib.tess_session_options_set_intra_op_threads(options, _c_int32("intra_op_threads",
                                                                                    intra_op_threads)))
            check(lib.tess_session_options_set_optimization_level(options, _c_int32("optimization_level",
                                                                                    optimization_level)))
            if enable_profiling or profile_file:
                if not profile_file:
                    profile_file = time.strftime("tessera_profile_%Y-%m-%d_%H-%M-%S.json")
                check(lib.tess_session_options_set_profiling(options, os.fspath(profile_file).encode("utf-8")))
            if optimized_model_filepath:
                check(lib.tess_session_options_set_optimized_model_path(
                    options, os.fspath(optimized_model_filepath).encode("utf-8")))
            if isinstance(memory_limit_bytes, bool) or not isinstance(memory_limit_bytes, int) \
                    or not 0 <= memory_limit_bytes < 2**64:
                raise InvalidArgument(f"memory_limit_bytes must be an int from 0 to 2**64-1, not {memory_limit_bytes!r}")
            check(lib.tess_session_options_set_memory_limit(options, memory_limit_bytes))
            if hasattr(path_or_bytes, "SerializeToString"):  # onnx.ModelProto
                path_or_bytes = path_or_bytes.SerializeToString()
            if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
                data = bytes(path_or_bytes)
                check(lib.tess_session_create_from_bytes(environment.handle, data, len(data), None, options,
                                                         ctypes.byref(session)))
            elif isinstance(path_or_bytes, (str, os.PathLike)):
                path = os.fspath(path_or_bytes).encode("utf-8")
                check(lib.tess_session_create(environment.handle, path, options, ctypes.byref(session)))
            else:
                raise InvalidArgument(f"expected a model path, bytes or onnx.ModelProto, not "
                                      f"{type(path_or_bytes).__name__}")
        finally:
            lib.tess_session_options_release(options)
        self._handle = session.value
        # The finalizer holds the environment, so the environment is released after the session.
        self._finalizer = weakref.finalize(self, _release_session, self._handle, environment)
        self._inputs = self._describe(lib.tess_session_input_count, lib.tess_session_input_info)
        self._has_default = [bool(lib.tess_session_input_has_default(self._handle, i)) for i in range(len(self._inputs))]
        self._outputs = self._describe(lib.tess_session_output_count, lib.tess_session_output_info)
        self._input_by_name = {arg.name: arg for arg in self._inputs}

    def _describe(self, count: Callable, info: Callable) -> list[NodeArg]:
        args = []
        for i in range(count(self._handle)):
            value_info = ValueInfo()
            check(info(self._handle, i, ctypes.byref(value_info)))
            args.append(NodeArg(value_info))
        return args

    @property
    def environment(self) -> Environment:
        return self._env

    def get_inputs(self) -> list[NodeArg]:
        """The graph inputs a run must feed, in order, as onnxruntime lists them: inputs with an initializer are
        :meth:`get_overridable_initializers`."""
        return [arg for arg, default in zip(self._inputs, self._has_default) if not default]

    def get_overridable_initializers(self) -> list[NodeArg]:
        """Graph inputs that have an initializer: a run may leave them out or feed a value that overrides it."""
        return [arg for arg, default in zip(self._inputs, self._has_default) if default]

    def get_outputs(self) -> list[NodeArg]:
        return list(self._outputs)

    def get_partitions(self) -> list[dict[str, Any]]:
        """The partition plan in execution order: one dict per fused subgraph with ``provider``, ``nodes`` (node
        names, "op_type#index" for unnamed nodes), ``ops`` ("domain:op_type" or "op_type"), ``inputs`` and
        ``outputs`` (the values crossing its boundary) and ``copy_count`` (inputs copied from another memory kind
        on every run)."""
        plan = []
        for i in range(lib.tess_session_partition_count(self._handle)):
            info = PartitionInfo()
            check(lib.tess_session_partition_info(self._handle, i, ctypes.byref(info)))
            plan.append({
                "provider": decode(info.provider),
                "nodes": strings(info.node_names, info.node_count),
                "ops": strings(info.node_ops, info.node_count),
                "inputs": strings(info.inputs, info.input_count),
                "outputs": strings(info.outputs, info.output_count),
                "copy_count": int(info.copy_count),
            })
        return plan

    def get_providers(self) -> list[str]:
        """The providers this session may use, in priority order, under onnxruntime's names where they have one
        ('CPUExecutionProvider'): the requested list restricted to what the environment has loaded (every usable
        provider when none was requested), then any provider the partition plan uses that the list lacks (a fallback
        the core appended)."""
        available = self._env.providers()
        names = [p for p in self._requested if p in available] if self._requested else list(available)
        for partition in self.get_partitions():
            if partition["provider"] not in names:
                names.append(partition["provider"])
        return [_ort.ort_provider_name(name) for name in names]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """The options given with each provider (as strings, like onnxruntime), by provider name."""
        given = dict(zip(self._requested or [], self._provider_options or []))
        return {name: dict(given.get(_ort.tessera_provider_name(name, []), {})) for name in self.get_providers()}

    def get_session_options(self) -> _ort.SessionOptions:
        return self._session_options

    def get_modelmeta(self) -> _ort.ModelMetadata:
        """What the model says about itself: producer, graph name, domain, doc string, version and its
        metadata_props as ``custom_metadata_map``."""
        meta = ModelMetadata()
        check(lib.tess_session_model_metadata(self._handle, ctypes.byref(meta)))
        custom = {decode(meta.custom_keys[i]): decode(meta.custom_values[i]) for i in range(meta.custom_count)}
        return _ort.ModelMetadata(decode(meta.producer_name), decode(meta.graph_name),
                                  decode(meta.graph_description), decode(meta.domain), decode(meta.description),
                                  int(meta.model_version), custom)

    def io_binding(self) -> _ort.IOBinding:
        """onnxruntime's I/O binding (host memory): bind inputs and outputs by name, then run_with_iobinding."""
        return _ort.IOBinding(self)

    def run_with_iobinding(self, iobinding: _ort.IOBinding, run_options: RunOptions | None = None) -> None:
        iobinding._run(run_options)

    def run_with_ort_values(self, output_names: Sequence[str] | None, input_dict_ort_values: Mapping[str, Any],
                            run_options: RunOptions | None = None) -> list[_ort.OrtValue]:
        """``run`` for OrtValue inputs and outputs."""
        feed = {name: value.numpy() if isinstance(value, _ort.OrtValue) else value
                for name, value in input_dict_ort_values.items()}
        return [_ort.OrtValue(result) for result in self.run(output_names, feed, run_options)]

    def run(self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any],
            run_options: RunOptions | None = None) -> list[Any]:
        """Runs the model and returns the requested outputs (all of them when ``output_names`` is empty or None).

        Values of ``input_feed`` are numpy arrays (or anything ``numpy.asarray`` takes), lists of arrays for
        sequence inputs, and None for an empty optional.  Tensors come back as numpy arrays that share the
        runtime's memory, sequences as lists, optionals as None or their content.
        """
        if not isinstance(input_feed, Mapping):
            raise InvalidArgument(f"input_feed must be a dict of name -> value, not {type(input_feed).__name__}")
        if run_options is not None and not isinstance(run_options, RunOptions):
            raise InvalidArgument(f"run_options must be a tessera.RunOptions, not {type(run_options).__name__}")
        output_names = list(output_names) if output_names else [arg.name for arg in self._outputs]
        for what, names in (("input_feed key", input_feed), ("output name", output_names)):
            for name in names:
                if not isinstance(name, str):
                    raise InvalidArgument(f"every {what} must be a str, not {type(name).__name__} ({name!r})")
        keep: list = []  # arrays that input tensors point into, alive until the values are released
        handles: list[int] = []
        try:
            for name, obj in input_feed.items():
                arg = self._input_by_name.get(name)  # an unknown name is reported by the runtime
                kind, element_type = (arg.kind, arg.element_type) if arg else (T.KIND_UNKNOWN, T.UNDEFINED)
                handles.append(to_value(obj, kind, element_type, keep, name))
            in_names = c_strings(list(input_feed))
            in_values = (Handle * max(len(handles), 1))(*handles)
            out_names = c_strings(output_names)
            outputs = (Handle * max(len(output_names), 1))()
            check(lib.tess_session_run_with_options(self._handle, run_options._handle if run_options else None,
                                                    in_names, in_values, len(handles), out_names, len(output_names),
                                                    outputs))
        finally:
            for handle in handles:  # before `keep` goes: the values point into its arrays
                lib.tess_value_release(handle)
        results, pending = [], [outputs[i] for i in range(len(output_names))]
        try:
            while pending:
                results.append(from_value(pending.pop(0), self))
        except BaseException:
            for handle in pending:
                lib.tess_value_release(handle)
            raise
        return results

    def end_profiling(self) -> str:
        """Ends profiling and writes the trace file; returns its path ('' when the session is not profiled), as
        onnxruntime's ``InferenceSession.end_profiling``.  Later calls return the same path without writing."""
        path = ctypes.c_char_p()
        check(lib.tess_session_end_profiling(self._handle, ctypes.byref(path)))
        return decode(path.value)

    def get_profiling_summary(self, max_rows: int = 15) -> str:
        """Node time by operator type so far, as text (at most ``max_rows`` op types); '' when not profiled."""
        text = ctypes.c_char_p()
        check(lib.tess_session_profiling_summary(self._handle, int(max_rows), ctypes.byref(text)))
        return decode(text.value)

    def __repr__(self) -> str:
        return f"InferenceSession(inputs={self._inputs!r}, outputs={self._outputs!r})"


def _release_session(handle: int, environment: Environment) -> None:  # noqa: ARG001 - holds the environment
    lib.tess_session_release(handle)
