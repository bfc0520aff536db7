"""Tessera as an ONNX backend (``onnx.backend.base.Backend``), for ``onnx.backend.test.BackendTest`` and friends.

Sessions made here are *strict*: the device names the providers that must run every node, and a node they cannot
run is an error instead of a silent fallback.  Device "CPU" maps to provider 'cpu' (with 'image', the host provider
that adds ImageDecoder, where it is loaded), "CUDA" (or "CUDA:N") to 'cuda';
:func:`supports_device` is true when the default environment has that provider loaded and usable.  The device id of
"CUDA:N" is not passed on: a provider picks its device itself.

Use the module like onnxruntime's backend::

    import tessera.backend as backend
    rep = backend.prepare(model, "CPU")
    outputs = rep.run([x])
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType, namedtupledict

from .errors import InvalidArgument
from .session import InferenceSession, get_default_environment

__all__ = ["TesseraBackend", "TesseraBackendRep", "prepare", "run_model", "run_node", "supports_device",
           "is_compatible", "provider_for_device"]

_PROVIDERS = {DeviceType.CPU: "cpu", DeviceType.CUDA: "cuda"}
# Host providers that serve operators the device's own provider leaves to them (plugins/image: ImageDecoder).
_HOST_COMPANIONS = {DeviceType.CPU: ("image",)}
# Keyword arguments prepare() passes on to InferenceSession.
_SESSION_OPTIONS = ("intra_op_threads", "optimization_level", "plugin_path", "environment")


def provider_for_device(device: str) -> str:
    """The provider a device string selects ("CPU" → 'cpu', "CUDA:0" → 'cuda'); InvalidArgument when unknown."""
    try:
        return _PROVIDERS[Device(device).type]
    except (AttributeError, KeyError, ValueError):
        raise InvalidArgument(f"unknown device {device!r} (expected 'CPU' or 'CUDA[:N]')") from None


class TesseraBackendRep(BackendRep):
    """A prepared model: runs an :class:`InferenceSession` with inputs given by position (or by name)."""

    def __init__(self, session: InferenceSession) -> None:
        self.session = session
        self._input_names = [arg.name for arg in session.get_inputs()]
        self._output_names = [arg.name for arg in session.get_outputs()]

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:  # noqa: ARG002
        """Runs the model.  ``inputs``: a list (matched to the graph inputs by position), a dict by name, or a
        single array for a one-input model.  Returns a namedtuple of the outputs, also indexable by name."""
        if isinstance(inputs, dict):
            feed = inputs
        else:
            if isinstance(inputs, np.ndarray) or not isinstance(inputs, (list, tuple)):
                inputs = [inputs]
            if len(inputs) > len(self._input_names):
                raise InvalidArgument(f"{len(inputs)} inputs given, the model has {len(self._input_names)}")
            feed = dict(zip(self._input_names, inputs))
        outputs = self.session.run(None, feed)
        return namedtupledict("Outputs", self._output_names)(*outputs)


class TesseraBackend(Backend):
    """The ONNX backend interface over Tessera sessions."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            provider = provider_for_device(device)
        except InvalidArgument:
            return False
        return provider in get_default_environment().providers()

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:  # noqa: ARG003
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: onnx.ModelProto | bytes | str, device: str = "CPU", **kwargs: Any) -> TesseraBackendRep:
        """Creates a strict session on the device's provider.  ``model`` is a ModelProto, serialized bytes or a
        path; ``intra_op_threads``, ``optimization_level``, ``plugin_path`` and ``environment`` are passed on."""
        options = {k: v for k, v in kwargs.items() if k in _SESSION_OPTIONS}
        providers = [provider_for_device(device)]
        environment = options.get("environment") or get_default_environment()
        loaded = environment.providers()
        providers += [p for p in _HOST_COMPANIONS.get(Device(device).type, ()) if p in loaded]
        session = InferenceSession(model, providers=providers, strict=True, **options)
        return TesseraBackendRep(session)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[np.dtype, tuple[int, ...]]] | None = None,
                 **kwargs: Any) -> tuple[Any, ...]:
        """Runs one node: wraps it in a model whose inputs take the arrays' types and shapes (``opset_version``
        in kwargs picks the default-domain opset, the newest one otherwise)."""
        super().run_node(node, inputs, device=device, outputs_info=outputs_info, **kwargs)  # onnx's node checker
        if isinstance(inputs, dict):
            inputs = [inputs[name] for name in node.input if name]
        present = [name for name in node.input if name]
        if len(inputs) != len(present):
            raise InvalidArgument(f"node {node.op_type} has {len(present)} inputs, {len(inputs)} given")
        graph_inputs = [_value_info(name, value) for name, value in zip(present, inputs)]
        graph_outputs = []
        for k, name in enumerate(o for o in node.output if o):
            if outputs_info is not None and k < len(outputs_info):
                dtype, shape = outputs_info[k]
                graph_outputs.append(helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape))
            else:
                graph_outputs.append(helper.make_empty_tensor_value_info(name))
        opsets = [helper.make_opsetid("", kwargs.get("opset_version", onnx.defs.onnx_opset_version()))]
        if node.domain not in ("", "ai.onnx"):
            opsets.append(helper.make_opsetid(node.domain, 1))
        graph = helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=opsets)
        return cls.run_model(model, inputs, device, **kwargs)


def _value_info(name: str, value: Any) -> onnx.ValueInfoProto:
    if isinstance(value, (list, tuple)):  # a sequence of tensors
        first = np.asarray(value[0]) if value else np.zeros(0, np.float32)
        element = helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(first.dtype), None)
        return helper.make_value_info(name, helper.make_sequence_type_proto(element))
    array = np.asarray(value)
    element = onnx.TensorProto.STRING if array.dtype.kind in "OUS" else helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor_value_info(name, element, array.shape)


prepare = TesseraBackend.prepare
run_model = TesseraBackend.run_model
run_node = TesseraBackend.run_node
supports_device = TesseraBackend.supports_device
is_compatible = TesseraBackend.is_compatible
