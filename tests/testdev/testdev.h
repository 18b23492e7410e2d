/* What testdev counts, for tests: its kn_backend.context points at one of these. */
#ifndef KN_TESTDEV_H
#define KN_TESTDEV_H

#include <stdatomic.h>

typedef struct testdev_stats {
    atomic_long local_made;     /* per-context kernel states made (kn_local_state) */
    atomic_long local_remade;   /* ... found keyed by other shapes and remade */
    atomic_long local_released; /* ... released by the runtime */
    atomic_long captured;       /* stream graphs recorded */
    atomic_long launched;       /* graph launches */
    atomic_long destroyed;      /* graphs destroyed */
    atomic_long tuned;          /* layers "timed" at build (tune) */
    atomic_long to_host;        /* copies from device to host memory */
    atomic_long on_device;      /* copies from device to device memory */
} testdev_stats;

#endif
