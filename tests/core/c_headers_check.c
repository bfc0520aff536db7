/* Compiled as C99 with -pedantic -Werror: the public headers must be plain C. */
#include "tessera/common.h"
#include "tessera/custom_op.h"
#include "tessera/provider.h"
#include "tessera/tessera.h"

#include <stdio.h>
#include <string.h>

int main(void) {
    TessEnvOptions options;
    TessEnv* env = NULL;
    TessStatus* status;
    memset(&options, 0, sizeof options);
    options.struct_size = sizeof options;
    options.no_default_plugin_dirs = 1;
    status = tess_env_create(&options, &env);
    if (status != NULL) {
        fprintf(stderr, "%s\n", tess_status_message(status));
        tess_status_release(status);
        return 1;
    }
    printf("tessera %s from C: %u plugins\n", tess_version(), (unsigned)tess_env_plugin_count(env));
    tess_env_release(env);
    tess_status_release(NULL); /* release functions accept NULL */
    tess_value_release(NULL);
    return 0;
}
