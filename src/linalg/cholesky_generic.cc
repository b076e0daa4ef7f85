// The portable copy of the Cholesky family.
#include "linalg/cholesky_isa.h"
