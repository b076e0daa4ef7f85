// The AVX-512 copy of the Cholesky family.
#define SINEW_LINALG_AVX512
#include "linalg/cholesky_isa.h"
