/* A shared library without the plugin entry symbol: discovery must skip it with a reason. */
#include "tessera/common.h"
TESS_EXPORT int tessera_test_not_a_plugin(void) { return 42; }
