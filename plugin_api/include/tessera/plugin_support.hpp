/*
 * Tessera plugin support: the header-only C++17 layer for provider and custom-op authors, installed with the SDK.
 * It holds what every plugin would otherwise write again (the in-tree providers use it too):
 *   support/plugin_entry.hpp   the entry function: ABI negotiation, once-only initialization, the exports table
 *   support/status.hpp         Error, guarded (exceptions -> TessStatus at every ABI boundary), throw_if_error
 *   support/element_types.hpp  element-type names and sizes, shape strings
 *   support/float16.hpp        float16 / bfloat16 conversions (round to nearest even)
 *   support/tensor.hpp         TensorView: typed, checked access to a TessValue
 * Nothing here links anything or keeps global state: each plugin owns its host pointer and passes it in, so two
 * plugins in one process never share a variable through these headers.
 */
#ifndef TESSERA_PLUGIN_SUPPORT_HPP_
#define TESSERA_PLUGIN_SUPPORT_HPP_

#include "tessera/support/element_types.hpp"
#include "tessera/support/float16.hpp"
#include "tessera/support/plugin_entry.hpp"
#include "tessera/support/status.hpp"
#include "tessera/support/tensor.hpp"

#endif  // TESSERA_PLUGIN_SUPPORT_HPP_
