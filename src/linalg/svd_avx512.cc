// The AVX-512 copy of the SVD.
#define SINEW_LINALG_AVX512
#include "linalg/svd_isa.h"
