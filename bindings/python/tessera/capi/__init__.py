"""Where onnxruntime keeps its native layer; here only what code written for onnxruntime imports from it
(``onnxruntime.capi.onnxruntime_pybind11_state``'s exceptions)."""
