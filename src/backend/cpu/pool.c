#include "backend/cpu/cpu.h"

const kn_kernel kn_cpu_pool[] = {{0}};
