/* A plugin library whose entry refuses to register (as one built for a host it cannot run on
 * would): loading it must fail with its reason every time, not only the first. */
#include "kiln/kiln_plugin.h"

KILN_PLUGIN_EXPORT int32_t kiln_plugin_entry(const kiln_host_api *host, kiln_registry *registry) {
    (void)registry;
    host->set_error("this library needs a device this machine lacks");
    return -1;
}
