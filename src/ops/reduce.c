#include "ops/op.h"

const kn_op_schema kn_ops_reduce[] = {{0}};
